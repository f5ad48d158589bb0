"""Row statistics of a tensor-core product over its columns, in the epilogue (compiler/
colstats.py: `Site.columns`): the C fragments are never stored; each lane folds its fragment
elements into per-row states, the 4 lanes of a quad merge theirs by shuffles, the warps side
by side along the columns through shared memory, and the block stores each row's statistic
(an LM head's cross-entropy split over the vocabulary: a tile's logsumexp, its label's logit).

After the last chunk each lane holds, per fragment i0, rows g and g + 8 (slots i2 / 2 = 0, 1)
and columns 2q, 2q + 1 of each fragment i1 (tests/runtime/emulate/kernels/lmhead_ce.cu is
the same kernel written by hand). A column past the axis's size (the tile's padding) is left
out; rows past it are folded and not stored. `ColumnStats` is a mixin of `MmaLowering`.
"""

from __future__ import annotations

from ..compiler import ir
from . import accum, lane_merges, staging
from . import program as P

FM, FN = 16, 8


class ColumnStats:
    def _columns_epilogue(self, fm: int, fn: int) -> None:
        """Fold, merge across the quad and the warps along the columns, store."""
        b, s = self.b, self.site
        stats = []
        for n in s.columns:
            kind = ir.op(self.g, n).fn
            slots = {}
            for slot in accum.SLOTS[kind][1]:
                slots[slot] = b.fresh("cst")
                init = accum.INIT_BY_KIND.get((kind, slot), accum.INIT.get(slot, "0.0f"))
                b.emit(P.Decl("float", slots[slot], "{" + ", ".join([init] * (2 * fm)) + "}",
                              shape=(fm, 2)))
            stats.append((n, kind, slots))
        self._columns_fold(stats, fm, fn)
        for _, kind, slots in stats:           # the quad's 4 lanes hold the row's columns
            def quad(kind=kind, slots=slots):
                v = {slot: f"{name}[i0][i5]" for slot, name in slots.items()}
                b.open()
                lane_merges.merge_one(b, kind, v, lambda x, ctype="float": b.value(
                    ctype, f"__shfl_xor_sync(0xffffffffu, {x}, off, 4)"))
                b.emit(P.For("off", "2", "off > 0", "off /= 2", b.close()))
            self._each([("i0", fm), ("i5", 2)], quad)
        if self.wn == 1:
            self._each([("i0", fm), ("i5", 2)], lambda: self._columns_store(
                stats, {(n, slot): f"{name}[i0][i5]" for n, _, sl in stats
                        for slot, name in sl.items()}, self._row("(2 * i5)"), "fq == 0"))
            return
        self._columns_across(stats, fm)

    def _columns_fold(self, stats, fm: int, fn: int) -> None:
        """Every accumulator element of the lane folded into its row's states; the loads over
        the rows alone (the label) read once per lane and row before (mma._row_vectors)."""
        b, s = self.b, self.site
        self.rows = self._row_vectors(fm)
        col = f"{self._axis_var('org', s.col)} + {self._warp_col()} + i1 * {FN} + fq * 2 + i2 % 2"

        def point():
            scope, checks = self._checked_point({s.col: col}, "i2")
            self._rows_at(scope, "i2")
            self.values[s.node] = "acc[i0][i1][i2]"

            def fold():
                for n, kind, slots in stats:
                    x = self.emitter.value(ir.operands(self.g, n)[0], scope)
                    accum.fold_value(b, kind, {slot: f"{name}[i0][i2 / 2]"
                                               for slot, name in slots.items()}, x,
                                     two_exps=True)
            b.emit(P.If(checks[s.col], self._scoped(fold)))
            self.values.clear()
        self._each([("i0", fm), ("i1", fn), ("i2", 4)], point)
        self.rows, self.row_scope = {}, None

    def _columns_across(self, stats, fm: int) -> None:
        """The warps along the columns: each quad's first lane writes its rows' states to
        shared memory ([warp][row] per slot); after a barrier the block's threads take its
        rows, merge the warps' states in order and store."""
        b, s = self.b, self.site
        rows, wn = self.tile[s.row], self.wn
        buffers = {}
        for n, _, slots in stats:
            for slot in slots:
                name = f"sm{len(self.smem)}"
                self.smem.append(P.SharedBuffer(name, "float", staging.next_offset(self.smem),
                                                str(wn * rows)))
                self.smem_terms.append((wn * rows * 4,))
                b.emit(P.Decl("float* const", name,
                              f"reinterpret_cast<float*>(smem + {self.smem[-1].offset})"))
                buffers[(n, slot)] = name
        b.emit(P.Barrier())        # (the block's previous tile's merges have read them)
        local = f"wr * {self.wtm} + i0 * {FM} + fg + i5 * 8"

        def write():
            for n, _, slots in stats:
                for slot, name in slots.items():
                    b.emit(P.Set(f"{buffers[(n, slot)]}[wc * {rows} + {local}]",
                                 f"{name}[i0][i5]"))
        self._each([("i0", fm), ("i5", 2)], lambda: b.emit(P.If("fq == 0",
                                                                self._scoped(write))))
        b.emit(P.Barrier())
        per = -(-rows // self.threads)

        def row():
            b.emit(P.Decl("const int", "crow", f"tid + i6 * {self.threads}"))

            def merged():
                v = {}
                for n, _, slots in stats:
                    for slot in slots:
                        v[(n, slot)] = b.fresh("cmg")
                        b.emit(P.Decl("float", v[(n, slot)], f"{buffers[(n, slot)]}[crow]"))
                for w in range(1, wn):
                    for n, kind, slots in stats:
                        lane_merges.merge_one(
                            b, kind, {slot: v[(n, slot)] for slot in slots},
                            lambda x, ctype="float", n=n, w=w: next(
                                f"{buffers[(n, slot)]}[{w * rows} + crow]"
                                for slot in slots if v[(n, slot)] == x))
                self._columns_store(stats, {(n, slot): name for (n, slot), name in v.items()},
                                    f"{self._axis_var('org', s.row)} + crow", None)
            b.emit(P.If(f"crow < {rows}", self._scoped(merged)))
        b.loop("i6", "0", str(per), "1", row, unroll=True)

    def _columns_store(self, stats, v: dict, row: str, keep: str | None) -> None:
        """Each statistic's value at `row` (`v`: (node, slot) -> its state's C variable) and
        the kernel's stores there (`keep`: which lanes store, None: all)."""
        s = self.site
        scope, valid = self._point({s.row: row})
        for n, kind, slots in stats:
            state = {slot: v[(n, slot)] for slot in slots}
            self.values[n] = f"({lane_merges.finished(kind, state)})"
        cond = valid if keep is None else f"{valid} && {keep}"
        for n in self.k.stores:
            self._store(n, scope, {"valid": cond})
        self.values.clear()


__all__ = ["ColumnStats"]
