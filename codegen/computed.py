"""Operand tiles computed as they are staged (tensorcore.Site.computed: `X * g` of a norm
fused into the product, `gelu(X)`): the scalar emitter evaluates the operand at each element
of the tile, reading its loads from global memory, eight positions at a time from one
16-byte load of each load where the loads allow (`vectorizable`), rounds it to the
product's dtype and stores it at the tile's position (`tiles.offset`: swizzled, plain or
padded rows), zeros outside. `ComputedTiles` is a mixin of `MmaLowering`, beside
`SharedTiles` (whose copy calls `_copy_computed`) and `RowStats` (which reads `_vectored`)."""

from __future__ import annotations

from ..compiler import ir
from ..compiler.operand_reads import vector_loads
from . import program as P
from .builder import Ix
from .tiles import VECTOR, offset


class ComputedTiles:
    def _copy_computed(self, t: dict, vector: int, stage: str, c0: str, clen: str) -> None:
        """The tile of an operand computed from loads (tensorcore.Site.computed): its value at
        each element (the scalar emitter, reading the loads from global memory), rounded, zeros
        outside; `vector` (8) consecutive elements at a time from one 16-byte load of each load
        along the tile's inner axis (`_vectored`), stored 16 bytes at a time, or one."""
        b = self.b
        per_row = t["inner"].extent // vector
        pack = "napkin_pack_half2" if t["ctype"] == "__half" else "napkin_pack_bf162"

        def body():
            self._thread_element(per_row, vector)
            valid, scope = self._element_scope(t, "eo", "ei", c0, clen)
            at = f"{self.at(t, stage)} + {offset(t['layout'], 'eo', 'ei', self._row_term(per_row))}"
            if vector == 1:
                zero = P.Set(f"({at})[0]", f"napkin_from_float<{t['ctype']}>(0.0f)")
            else:
                zero = P.Set(f"*reinterpret_cast<uint4*>({at})", "make_uint4(0u, 0u, 0u, 0u)")

            def inside():
                values = self._vectored(t["node"], t["inner"].name, scope, vector)
                if vector == 1:
                    b.emit(P.Set(f"({at})[0]", f"napkin_from_float<{t['ctype']}>({values[0]})"))
                    return
                words = [f"{pack}({values[i]}, {values[i + 1]})" for i in range(0, vector, 2)]
                b.emit(P.Set(f"*reinterpret_cast<uint4*>({at})", f"make_uint4({', '.join(words)})"))
            b.emit(P.If(valid, self._scoped(inside), (zero,)))
        self._each_thread(t["outer"].extent * per_row, body, index=self.threads % per_row != 0)

    def _vectored(self, n: int, axis: str, scope: dict, width: int) -> list[str]:
        """n's values (C floats) at `width` consecutive positions of `axis` from scope's: with
        width 8, each load along `axis` is read by one 16-byte load (`load`), its eight values
        taken from the registers (`vectorizable` says when that is right)."""
        if width == 1:
            return [self.emitter.number(n, scope)]
        base = scope[axis].expr
        self.vectored = {"axis": axis, "base": base, "loads": {}}
        try:
            out = []
            for j in range(width):
                self.vectored["j"] = j
                out.append(self.emitter.number(n, {**scope, axis: Ix(f"({base} + {j})")}))
        finally:
            self.vectored = None
        return out

    def load(self, n: int, scope: dict) -> str:
        """A load at a position of `_vectored`'s run: the value from the run's 16-byte load."""
        v = self.vectored
        axes = ir.type_of(self.g, n).axes
        # the load's contiguous axis at the run's position (under the run's axis name or,
        # through a renaming view, another: `N[t m2]`), and no other axis there (a diagonal)
        run = f"({v['base']} + {v['j']})" if v is not None else None
        at = [getattr(scope.get(a), "expr", None) for a in axes]
        if v is None or not axes or at[-1] != run or run in at[:-1]:
            return super().load(n, scope)
        if n not in v["loads"]:
            param, dtype = self.names[n]
            offset = self.global_layout(n, axes).offset({**scope, axes[-1]: Ix(v["base"])})
            v["loads"][n] = (self.b.value("uint4", f"*reinterpret_cast<const uint4*>({param} + "
                                                   f"({offset}))", "lv"), dtype)
        var, dtype = v["loads"][n]
        return f"{'napkin_half_at' if dtype == 'f16' else 'napkin_bf16_at'}({var}, {v['j']})"

    def vectorizable(self, n: int, axis: str, extent: int) -> str | bool | None:
        """When `_vectored` may read n (computed from loads) along `axis` 8 positions at a time
        from a run of `extent` of them (compiler/operand_reads.vector_loads, and a run of 8 inside
        the axis or outside it: extent and size multiples of 8): always (True), by a runtime
        test of the size (a C condition), or never (None)."""
        if not vector_loads(self.g, n, axis, self.k.nodes, self.loads):
            return None
        size = self.sizes[axis]
        if extent % VECTOR or (size.isdigit() and int(size) % VECTOR):
            return None
        return True if size.isdigit() else f"{size} % {VECTOR} == 0"
