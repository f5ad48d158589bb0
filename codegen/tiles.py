"""Shared-memory tiles of the tensor-core kernels: the operands' tiles (swizzled, plain or padded
rows: the schedule's `layouts`, compiler/tilelayout.py) and 4-byte vectors, staged by cp.async
(codegen/mma.py, flash.py and chain.py copy through these).

A tile is a dict built once per kernel (`_tile`, `_vector`) and copied per chunk (`_copy`): 16
bytes at a time where the rows allow it, else 8 or 4 (rows of a 16-bit array whose length is a
multiple of 4 or 2 values: compiler/copies.row_widths, which the cost model reads too; the rows
of an array napkin pads, compiler/pitch.py, always allow 16: codegen/tile_rows.py), else one
value at a time; zeros outside the arrays. Every position in a tile, stored or read by ldmatrix, is
`offset`'s. An operand computed as it is staged is codegen/computed.py's. `SharedTiles`, a mixin of
`MmaLowering`, reads the lowering's graph, names, sizes, schedule, shared buffers and builder.
"""

from __future__ import annotations

from typing import NamedTuple

from ..compiler import headpad, ir, rowsource
from ..compiler.packing import position
from ..compiler.rowsource import RowSource
from ..compiler.tilelayout import VALUES, TileLayout
from . import cexpr, program as P, staging
from .builder import Ix
from .tile_rows import CHUNK, RVECTOR, VALUE_BYTES, VECTOR, TileRows

UNROLLED = 8     # copy rounds per thread unrolled whole (more: a loop, as the fallback's 64)
# A copy outside the arrays is a cp.async of src-size 0 (writes zeros, reads nothing): its source is
# passed as computed and never dereferenced (the emulator checks it; as Triton's masked copies do).
# A safe pointer's select cost two SEL and two MOV per copy in the main loop.
SHIFT = VALUES.bit_length() - 1   # log2 of the values in a 16-byte chunk


def offset(layout: TileLayout, row: str, col: str, lane: str | None = None) -> str:
    """The position (C, in values from the stage's start) of the value at `row`, `col` of a
    tile: row * pitch + col, the column's 16-byte chunk XORed with the row's term where the
    layout is swizzled (compiler/tilelayout.py). The term repeats every 8 rows: `lane`, when
    given, is the row's part within its 8 (the row less a multiple of 8: a fragment's or a
    chunk's origin), which the term is computed from, so that it is the same in every chunk
    and fragment (loop-invariant: computed once per thread)."""
    at = f"({row}) * {layout.pitch}"
    if layout.block:            # row blocks side by side (a wgmma operand, TileLayout.block)
        at = f"(({col}) / {layout.block}) * {layout.outer * layout.block} + {at}"
        col = f"({col}) % {layout.block}"
    if not layout.mask:
        return f"{at} + {col}"
    # ((r >> shift) & mask) << SHIFT in two operations (shift <= SHIFT: rows of 2 chunks or more)
    term = f"(({lane if lane is not None else row}) << {SHIFT - layout.shift}) & " \
        f"{layout.mask << SHIFT}"
    return f"{at} + (({col}) ^ ({term}))"


class TileAxis(NamedTuple):
    """One axis of a shared tile: its extent, where it starts (C, or CHUNK: the chunk being
    copied, or None: 0) and the in-range test of a local index `{}` (or CHUNK, or None)."""
    name: str
    extent: int
    origin: str | None
    bound: str | None


class SharedTiles(TileRows):
    def grouped(self, axis: str) -> TileAxis:
        """A tile axis covering the block's tile of a woven axis."""
        org = self._axis_var("org", axis)
        return TileAxis(axis, self.tile[axis], org, f"{org} + {{}} < {self.sizes[axis]}")

    def chunked(self, axis: str) -> TileAxis:
        """A tile axis covering a chunk of the streamed axis (which one: at the copy)."""
        return TileAxis(axis, self.kp.schedule.stream[1], CHUNK, CHUNK)

    def whole(self, axis: str, size: int, node: int | None = None) -> TileAxis:
        """A tile axis covering all of a static axis; of node's tile, as wide as the site
        pads it (compiler/headpad.py), the columns past the axis zeros (their copies test
        the column: a 16-byte one is all inside or all past a head of a multiple of 8)."""
        extent = size if node is None else headpad.extent(self.site, node, axis, size)
        return TileAxis(axis, extent, None, f"{{}} < {size}" if extent > size else None)

    def _tile(self, n: int, frag: TileAxis, k: TileAxis, buffer: dict | None = None) -> dict:
        """A shared tile of operand n over a fragment axis and the mma's k axis: [outer]
        [pitch], inner the one of the two that is contiguous in the array, in the layout the
        schedule gives it (swizzled, plain or padded rows); `stages` of it when it holds a
        chunk (the pipeline), declared once per kernel; or, given `buffer` (a tile of the
        same array in the same layout: attention's K read again as V), that one's memory."""
        axes = ir.type_of(self.g, n).axes
        inner, outer = (frag, k) if position(axes, frag.name) > axes.index(k.name) else (k, frag)
        layout = self.kp.schedule.layout(n, (outer.name, inner.name))
        assert (layout.outer, layout.inner) == (outer.extent, inner.extent), (layout, outer, inner)
        # an operand computed from loads (tensorcore.Site.computed) is computed at each
        # element as it is staged, and rounded
        computed = n in getattr(self.site, "computed", ())
        _, dtype = ("", "f32") if computed else self.names[self._source(n)[0]]
        # an f32 intermediate beside a 16-bit operand is rounded as it is staged
        # (compiler/tensorcore._rounded): the tile holds the product's dtype
        convert = dtype != self.site.dtype
        dtype = self.site.dtype
        count = layout.count
        stages = self.kp.schedule.stages if CHUNK in (inner.origin, outer.origin) else 1
        ctype = cexpr.CTYPE[dtype]
        if buffer is not None:
            assert (buffer["node"], buffer["layout"], buffer["stages"]) == (n, layout, stages)
            return {**buffer, "inner": inner, "outer": outer, "k": k.name}
        name = f"sm{len(self.smem)}"
        self.smem.append(P.SharedBuffer(name, ctype, staging.next_offset(self.smem),
                                        str(count * stages)))
        self.smem_terms.append((count * stages * 2,))
        self.b.emit(P.Decl(f"{ctype}* const", name, f"reinterpret_cast<{ctype}*>(smem + "
                           f"{self.smem[-1].offset})"))
        return {"node": n, "name": name, "inner": inner, "outer": outer, "k": k.name,
                "layout": layout, "count": count, "stages": stages, "ctype": ctype,
                "convert": convert, "computed": computed}

    def _vector(self, n: int, axis: str) -> dict:
        """Two stages of a chunk of a 4-byte array over the streamed `axis` and the block's
        batch axes only (the dK/dV kernel's saved logsumexp and D, over the queries it
        streams), staged beside the operands' tiles by cp.async (`_copy`), read from shared
        memory at each element instead of from global memory at every element of every
        chunk (the schedule holds them in shared memory)."""
        param, dtype = self.names[n]
        chunk = self.kp.schedule.stream[1]
        stages = self.kp.schedule.stages
        ctype = cexpr.CTYPE[dtype]
        name = f"sm{len(self.smem)}"
        self.smem.append(P.SharedBuffer(name, ctype, staging.next_offset(self.smem),
                                        str(chunk * stages)))
        self.smem_terms.append((chunk * stages * 4,))
        self.b.emit(P.Decl(f"{ctype}* const", name, f"reinterpret_cast<{ctype}*>(smem + "
                           f"{self.smem[-1].offset})"))
        return {"node": n, "name": name, "vector": axis, "param": param, "count": chunk,
                "stages": stages}

    def _copy_vector(self, t: dict, stage: str, c0: str, clen: str) -> None:
        """The chunk at c0 of a staged vector (`_vector`): 4 bytes a thread, zeros past clen."""
        b = self.b
        axes = ir.type_of(self.g, t["node"]).axes

        def body():
            scope = {a: Ix(self._axis_var("org", a)) for a in axes if a != t["vector"]}
            scope[t["vector"]] = Ix(f"({c0} + e)")
            source = self.global_layout(t["node"], axes).offset(scope)
            param = t["param"]
            b.emit(P.Call("napkin_cp_async_4", (f"{self.at(t, stage)} + e",
                                                f"{param} + ({source})", f"(e < {clen}) ? 4 : 0")))
        if t["count"] > self.threads:
            self._each_thread(t["count"], body)
            return

        def once():         # one value a thread at most: no loop for nvcc to peel and unroll
            b.emit(P.Decl("const int", "e", "tid"))
            body()
        b.emit(P.If(f"tid < {t['count']}", self._scoped(once)))

    def at(self, t: dict, stage: str = "stage") -> str:
        """The tile's stage in use (a streamed tile has two)."""
        return f"({t['name']} + {stage} * {t['count']})" if t["stages"] > 1 else t["name"]

    def _copy(self, t: dict, stage: str = "0", c0: str = "c0", clen: str = "clen",
              vector: bool | None = None) -> None:
        """Block-wide copy of the operand's tile (the chunk at c0 of length clen, into this
        stage) to shared memory, zeros outside: 16 bytes at a time with cp.async when the rows
        allow it (the tile's inner axis is the array's contiguous one, its size a multiple of
        8 and the array 16-byte aligned; then a vector is all inside or all outside the
        array), else 8 or 4 bytes where a static size allows (`_narrow`), else one value at
        a time. The caller commits and waits."""
        b = self.b
        if "vector" in t:
            self._copy_vector(t, stage, c0, clen)
            return
        aligned = self._aligned(t)
        width = RVECTOR if t["convert"] and not t["computed"] else VECTOR
        if isinstance(aligned, str) and vector is not None:
            aligned = True if vector else None          # the size test ran outside the loop
        if aligned is None:         # no 16-byte copy: 8 or 4 bytes where the rows allow
            self._copy_loop(t, self._narrow(t), stage, c0, clen)
            return
        if aligned is True:
            self._copy_loop(t, width, stage, c0, clen)
            return
        b.emit(P.If(aligned, self._scoped(lambda: self._copy_loop(t, width, stage, c0, clen)),
                    self._scoped(lambda: self._copy_loop(t, 1, stage, c0, clen))))

    def _source(self, n: int) -> tuple[int, RowSource | None]:
        """(the global array operand n is copied from, its row source or None): a split's
        window or a gather (compiler/rowsource.py: a paged cache) is a tile of its base's
        rows at positions computed per row."""
        found = next((r for r in getattr(self.site, "rows", ()) if r.node == n), None) or \
            rowsource.window(self.g, n)
        if found is None:   # a view that only renames a load (tensorcore.Site.renamed): its
            # tile is the load's, at the view's positions (the same memory, other names)
            return dict(getattr(self.site, "renamed", ())).get(n, n), None
        return found.base, found

    def _copy_loop(self, t: dict, vector: int, stage: str, c0: str, clen: str) -> None:
        b = self.b
        base, window = self._source(t["node"])
        inner, outer = t["inner"], t["outer"]
        per_row = inner.extent // vector
        count = outer.extent * per_row
        if t["computed"]:
            self._copy_computed(t, vector, stage, c0, clen)
            return
        param, _ = self.names[base]
        if vector > 1 and self.threads % per_row == 0 and not t["convert"] and (
                window is None or window.split is not None and not window.computed
                and window.split[2] == t["outer"].name):     # (rows of keys, not columns)
            self._copy_rows(t, per_row, stage, c0, clen, vector, window)
            return

        def body():
            self._thread_element(per_row, vector)
            valid, source = self._element(t, "eo", "ei", c0, clen, window)
            at = f"{self.at(t, stage)} + {offset(t['layout'], 'eo', 'ei', self._row_term(per_row))}"
            if vector == 1:
                zero = f"napkin_from_float<{t['ctype']}>(0.0f)"
                value = f"{param}[{source}]"
                if t["convert"]:
                    value = f"napkin_from_float<{t['ctype']}>({value})"
                b.emit(P.Set(f"({at})[0]", f"({valid}) ? {value} : {zero}"))
            elif t["convert"]:  # 4 f32 values in one load, rounded in pairs, one 8-byte store
                pack = "napkin_pack_half2" if t["ctype"] == "__half" else "napkin_pack_bf162"
                b.emit(P.Decl("const float4", "cv", f"({valid}) ? *reinterpret_cast<const "
                              f"float4*>({param} + ({source})) : make_float4(0.0f, 0.0f, 0.0f, 0.0f)"))
                b.emit(P.Set(f"*reinterpret_cast<uint2*>({at})",
                             f"make_uint2({pack}(cv.x, cv.y), {pack}(cv.z, cv.w))"))
            else:   # src-size 0 outside the arrays: zeros, nothing read (see CHUNK)
                nb = vector * VALUE_BYTES
                b.emit(P.Call(f"napkin_cp_async_{nb}", (at, f"{param} + ({source})",
                                                        self._src_bytes(t, valid, vector, c0,
                                                                        clen))))
        self._each_thread(count, body, index=self.threads % per_row != 0)

    def _row_term(self, per_row: int) -> str | None:
        """The row a copy round's swizzle term is computed from, where every round of a
        thread has the same one (`tiles.offset`'s `lane`): each thread keeps its column and
        the rounds step by a multiple of 8 rows (the term's period), so the term is its
        first row's, the same in every round and chunk; else None (each round's own)."""
        if self.threads % per_row == 0 and (self.threads // per_row) % 8 == 0:
            return f"tid / {per_row}"
        return None

    def _thread_element(self, per_row: int, vector: int) -> None:
        """eo, ei: the local row and column of this thread's element (of `vector` values) in
        copy round r (index e), `per_row` elements to a row."""
        b = self.b
        if self.threads % per_row == 0:   # each thread keeps its column: rows step evenly
            b.emit(P.Decl("const int", "eo", f"tid / {per_row} + r * {self.threads // per_row}"))
            b.emit(P.Decl("const int", "ei", f"tid % {per_row}" if vector == 1 else
                          f"(tid % {per_row}) * {vector}"))
        else:
            b.emit(P.Decl("const int", "eo", f"e / {per_row}"))
            b.emit(P.Decl("const int", "ei", f"e % {per_row}" if vector == 1 else
                          f"(e % {per_row}) * {vector}"))

    def _copy_rows(self, t: dict, per_row: int, stage: str, c0: str, clen: str,
                   vector: int = VECTOR, window=None) -> None:
        """Copies of `vector` values (16, 8 or 4 bytes), each thread one column of vectors
        down the rows: source and destination computed once, then a constant step a round
        (each round tests its row; a split's `window`, consecutive rows of its base's, its
        key too); a swizzled tile's rounds step by 8 rows or a multiple where the threads
        allow (the swizzle's period), else each round's destination is computed."""
        b = self.b
        param, _ = self.names[self._source(t["node"])[0]]
        rows = self.threads // per_row
        axes = ir.type_of(self.g, t["node"]).axes
        after = axes[position(axes, t["outer"].name) + 1:]   # (packed rows: their inner axis's)
        if window is not None:      # the base's axes after its row's (the label None)
            after = ir.type_of(self.g, window.base).axes[list(window.labels).index(None) + 1:]
        pitch = self.row_pitch(t["node"])
        stride = " * ".join(f"({self.itype})({pitch if pitch and a == axes[-1] else self.sizes[a]})"
                            for a in after) or f"({self.itype})1"

        def block():
            b.emit(P.Decl("const int", "ei", f"(tid % {per_row}) * {vector}"))
            b.emit(P.Decl("const int", "eo0", f"tid / {per_row}"))
            _, first = self._element(t, "eo0", "ei", c0, clen, window)
            b.emit(P.Decl(f"const {t['ctype']}* const", "cps", f"{param} + ({first})"))
            layout = t["layout"]
            stepped = not layout.mask or rows % 8 == 0
            if stepped:
                b.emit(P.Decl(f"{t['ctype']}* const", "cpd",
                              f"{self.at(t, stage)} + {offset(layout, 'eo0', 'ei')}"))
            else:
                b.emit(P.Decl(f"{t['ctype']}* const", "cpd", self.at(t, stage)))

            def each():
                b.emit(P.Decl("const int", "eo", f"eo0 + r * {rows}"))
                valid = self._element_scope(t, "eo", "ei", c0, clen, unpack=False)[0] \
                    if window is None else self._element(t, "eo", "ei", c0, clen, window)[0]
                src = f"cps + (({self.itype})(r * {rows}) * {stride})"
                dst = f"cpd + r * {rows * layout.pitch}" if stepped else \
                    f"cpd + {offset(layout, 'eo', 'ei')}"
                nb = vector * VALUE_BYTES
                b.emit(P.Call(f"napkin_cp_async_{nb}", (dst, src, self._src_bytes(
                    t, valid, vector, c0, clen))))
            self._each_thread(t["outer"].extent * per_row, each, index=False)
        b.emit(P.Block(self._scoped(block)))

    def _element(self, t: dict, eo: str, ei: str, c0: str, clen: str, rows) -> tuple[str, str]:
        """(the in-range test, the offset in the source array) of the tile's element at
        local row eo and column ei (C names); `rows`: the tile's row source or None."""
        axes = ir.type_of(self.g, t["node"]).axes
        valid, scope = self._element_scope(t, eo, ei, c0, clen)
        checks = [valid] if valid != "true" else []
        if rows is None:
            return " && ".join(checks) or "true", self.global_layout(t["node"], axes).offset(scope)
        row = None
        if rows.split is not None:  # the key x = p_x * size(s_x) + s_x, zeros past x
            x, part, share = rows.split
            row = (f"(({self.itype}){scope[part].expr} * ({self.itype})({self.sizes[share]}) + "
                   f"{scope[share].expr})")
            checks.append(f"{row} < ({self.itype})({self.sizes[x]})")
        at, positions = {}, iter(rows.positions)
        base_axes = ir.type_of(self.g, rows.base).axes
        for axis, label in zip(base_axes, rows.labels):
            if label is not None:
                at[axis] = scope[label]
                continue
            position = next(positions)
            if position is None:    # a window's row along x
                at[axis] = Ix(row)
                continue
            # a computed position, clamped into its axis as a gather reads (docs/language.md)
            i = self.emitter.value(position, scope)
            clamped = self.b.value("long long", f"napkin_clamp_index({i}, {self.sizes[axis]})",
                                   "ix")
            at[axis] = Ix(f"(({self.itype})({clamped}))")
        return " && ".join(checks) or "true", self.global_layout(rows.base, base_axes).offset(at)

    def _element_scope(self, t: dict, eo: str, ei: str, c0: str, clen: str,
                       unpack: bool = True) -> tuple[str, dict]:
        """(the in-range test, the index scope of the operand's axes) of the tile's element at
        local row eo and column ei (C names); `unpack=False`: packed rows left as their one
        axis (a caller reading the test alone: no decomposition emitted)."""
        axes = ir.type_of(self.g, t["node"]).axes
        scope = {a: Ix(self._axis_var("org", a)) for a in axes if a in self.tile}
        checks = []
        for (axis, _, origin, bound), local in ((t["outer"], eo), (t["inner"], ei)):
            if origin == CHUNK:
                origin, bound = c0, f"{{}} < {clen}"
            scope[axis] = Ix(f"({origin} + {local})" if origin else local)
            if bound:
                checks.append(bound.format(local))
        return " && ".join(checks) or "true", self.unpacked(scope) if unpack else scope

    def _each_thread(self, count: int, body, index: bool = True) -> None:
        """`body` for e = tid, tid + threads, ... below count, as a loop of a fixed trip count
        (r) that nvcc unrolls whole up to UNROLLED rounds: `for (e = tid; e < count; e +=
        threads)` has a trip count it cannot know (tid's range), and gets a remainder
        prologue and a rolled body, some eighty instructions per copy in the main loop.
        (Unrolled, the one-value-at-a-time fallback's 64 or 128 loads would all be in
        flight at once, and spill.) A partial last round tests e. `index`: the body reads e (else only r)."""
        b = self.b
        rounds = -(-count // self.threads)

        def each():
            if index or count % self.threads:
                b.emit(P.Decl("const int", "e", f"tid + r * {self.threads}"))
            if count % self.threads:
                b.emit(P.If(f"e < {count}", self._scoped(body)))
            else:
                body()
        # (more rounds: `#pragma unroll 1`, a loop nvcc keeps rolled: unrolled by its own
        # heuristics, the copies' addresses would be live at once beside a whole chunk's
        # scores and spill)
        b.loop("r", "0", str(rounds), "1", each, unroll=True if rounds <= UNROLLED else 1)
