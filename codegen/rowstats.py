"""Reductions beside a tensor-core product: a statistic of each row (or column) of the block's
tile over the streamed axis, computed chunk by chunk and read by the epilogue.

RMSNorm fused into the next matrix product (`X * g * W * rsqrt(mean[k](X * X) + eps)`)
contracts `k` on the tensor cores and needs `mean[k](X * X)` of each of the block's rows in
its epilogue (compiler/tensorcore.Site.stats). The block's `T` threads cover its `R` rows in
groups of `L = min(32, T / R)` adjacent lanes (one row per group, `R / (T / L)` rows per
thread when T < R); in each chunk the lanes of a group take every L-th position of it, read
the statistic's argument from global memory (the scalar emitter; the operand tiles in
shared memory hold the product's rounded operands, not the loads) and fold it into their
accumulator state (codegen/accum.py: sum, mean, max, min, Welford's variance, logsumexp).
After the chunk loop the L lanes merge their states by butterfly shuffles and the group's
first lane writes the row's value to shared memory, which every fragment element of the
epilogue reads at its row. `RowStats` is a mixin of `MmaLowering`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..compiler import ir
from . import accum, lane_merges, staging
from . import program as P
from .builder import Ix

WARP = 32


@dataclass(frozen=True)
class Stat:
    node: int
    kind: str              # accumulators: sum | mean | max | min | var | logsumexp
    axis: str              # the product's row or column axis the statistic runs over
    slots: dict            # state slot -> register array (one entry per row the thread takes)
    buffer: str            # shared memory: the finished value of each of the block's rows
    vector: str | bool | None   # the argument read 8 positions at a time: always, by a size
                                # test (C), never (computed.vectorizable)


class RowStats:
    def _stat_layout(self, axis: str) -> tuple[int, int]:
        """(lanes per row L, rows per thread) for the block's rows along `axis`."""
        rows, threads = self.tile[axis], self.threads
        lanes = max(1, min(WARP, threads // rows))
        return lanes, -(-rows // (threads // lanes))

    def _stats_declare(self) -> list[Stat]:
        """Each statistic's state per row the thread takes (initial values) and its
        shared-memory row buffer."""
        b, s = self.b, self.site
        out = []
        for n in s.stats:
            kind = ir.op(self.g, n).fn
            axis = next(a for a in ir.type_of(self.g, n).axes if a in (s.row, s.col))
            _, per = self._stat_layout(axis)
            slots = {}
            for slot in accum.SLOTS[kind][1]:
                slots[slot] = b.fresh("rst")
                init = accum.INIT_BY_KIND.get((kind, slot), accum.INIT.get(slot, "0.0f"))
                b.emit(P.Decl("float", slots[slot], "{" + ", ".join([init] * per) + "}",
                              shape=(per,)))
            buffer = f"sm{len(self.smem)}"
            rows = self.tile[axis]
            self.smem.append(P.SharedBuffer(buffer, "float", staging.next_offset(self.smem),
                                            str(rows)))
            self.smem_terms.append((rows * 4,))
            b.emit(P.Decl("float* const", buffer,
                          f"reinterpret_cast<float*>(smem + {self.smem[-1].offset})"))
            vector = self.vectorizable(ir.operands(self.g, n)[0], s.red,
                                       self.kp.schedule.stream[1])
            out.append(Stat(n, kind, axis, slots, buffer, vector))
        return out

    def _stats_fold(self, stats: list[Stat], chunk: int, vector: bool | None) -> None:
        """Fold the current chunk (c0, clen) into each thread's rows' states (`vector`: what
        the size test outside the loop chose, if one ran)."""
        for st in stats:
            wide = st.vector is True or (isinstance(st.vector, str) and bool(vector))
            self._stat_fold(st, chunk, 8 if wide else 1)

    def _stat_fold(self, st: Stat, chunk: int, width: int) -> None:
        """The lanes of each row take `width` consecutive positions at a time, every
        `lanes * width`-th (a run of 8 is all inside the chunk or all outside)."""
        b, s = self.b, self.site
        lanes, per = self._stat_layout(st.axis)
        step = self.threads // lanes
        arg = ir.operands(self.g, st.node)[0]
        org = self._axis_var("org", st.axis)
        runs = -(-chunk // (lanes * width))

        def row():
            b.emit(P.Decl("const int", "srow", f"tid / {lanes} + i6 * {step}"))

            def position():
                b.emit(P.Decl("const int", "spos", f"(tid % {lanes}) * {width} + i7 * {lanes * width}"
                              if width > 1 else f"tid % {lanes} + i7 * {lanes}"))
                scope = {a: Ix(self._axis_var("org", a)) for a in s.batch}
                scope[st.axis] = Ix(f"({org} + srow)")
                scope[s.red] = Ix("(c0 + spos)")
                valid = f"spos < clen && {org} + srow < {self.sizes[st.axis]}"
                if self.tile[st.axis] % step:
                    valid += f" && srow < {self.tile[st.axis]}"

                def fold():
                    v = {slot: f"{name}[i6]" for slot, name in st.slots.items()}
                    for value in self._vectored(arg, s.red, scope, width):
                        accum.fold_value(b, st.kind, v, value, two_exps=True)
                b.emit(P.If(valid, self._scoped(fold)))
            b.loop("i7", "0", str(runs), "1", position, unroll=True)
        b.loop("i6", "0", str(per), "1", row, unroll=True)

    def _stats_finish(self, stats: list[Stat]) -> None:
        """Merge each row's lanes, write the rows' values, and make them visible."""
        b = self.b
        for st in stats:
            lanes, per = self._stat_layout(st.axis)
            step = self.threads // lanes

            def row(st=st, lanes=lanes, step=step):
                v = {slot: f"{name}[i6]" for slot, name in st.slots.items()}
                if lanes > 1:
                    b.open()
                    lane_merges.merge_one(b, st.kind, v, lambda x, ctype="float": b.value(
                        ctype, f"__shfl_xor_sync(0xffffffffu, {x}, off, {lanes})"))
                    b.emit(P.For("off", str(lanes // 2), "off > 0", "off /= 2", b.close()))
                b.emit(P.Decl("const int", "srow", f"tid / {lanes} + i6 * {step}"))
                keep = [f"tid % {lanes} == 0"] if lanes > 1 else []
                if self.tile[st.axis] % step:
                    keep.append(f"srow < {self.tile[st.axis]}")
                store = P.Set(f"{st.buffer}[srow]", lane_merges.finished(st.kind, v))
                if keep:
                    b.emit(P.If(" && ".join(keep), (store,)))
                else:
                    b.emit(store)
            b.loop("i6", "0", str(per), "1", row, unroll=True)
        if stats:
            b.emit(P.Barrier())

    def _stats_at(self, stats: list[Stat], local: dict[str, str]) -> None:
        """Register each statistic at a fragment element (`local`: its row and column within
        the block's tile) for the epilogue's expressions."""
        for st in stats:
            self.values[st.node] = f"{st.buffer}[{local[st.axis]}]"
