"""The schedule interpreter: runs a plan with NumPy exactly as its kernels would.

Kernel by kernel, block by block over the grouped axes (tails included),
chunk by chunk along the streamed axis, pass by pass, through the
accumulators: online-softmax rescaling, Welford merges, the partial states of
a reduced axis split across threads merged at the end. It computes in float64
so that any difference from the reference executor is a scheduling mistake,
not rounding.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..compiler import accumulators as acc
from ..compiler import ir
from ..compiler.canonical import through
from ..compiler.plan import KernelPlan, Plan
from . import dtypes, elementwise, labelled, reference, scatter
from ..compiler.schedule import SCATTER
from .splits import fold, fold_split, take
from ..compiler.split import complete_sizes
from ..compiler.merge import shaped
from .bind import bind_sizes, to_numpy
from .reads import OtherPositions
from .region import Region, _align, _floats


def interpret(plan: Plan, inputs: dict[str, object]) -> dict[str, np.ndarray]:
    """Outputs by name, in float64."""
    g = plan.graph
    arrays = {name: to_numpy(name, inputs[name], ir.op(g, n).dtype)
              for name, n in g.graph["inputs"].items()}
    sizes = complete_sizes(g, bind_sizes(plan.diagram, {n: a.shape for n, a in arrays.items()}))
    memory: dict[int, np.ndarray] = {}
    for name, n in g.graph["inputs"].items():
        dtype = ir.op(g, n).dtype
        stored = shaped(g, arrays[name], ir.type_of(g, n).axes, sizes)   # merged axes: merge.py
        stored = stored.astype(dtypes.numpy_dtype(dtype))
        memory[n] = elementwise.as_kind(stored, ir.kind_of_dtype(dtype))
    outside: set = set()       # gathers that read outside an axis (clamped, as CUDA does)
    for kp in plan.kernels:
        _run_kernel(g, kp, memory, sizes, outside)
    if outside:     # N0407 where such a read is used (runtime/unused_reads.py)
        reference.evaluate(plan.diagram, inputs)
    out = {}
    user = {s.name: s.axes for s in plan.diagram.outputs}
    for name, n in g.graph["outputs"].items():
        src = ir.operands(g, n)[0]
        dtype = ir.op(g, n).dtype
        value = shaped(g, memory[src], user[name], sizes)
        out[name] = value.astype(dtypes.numpy_dtype(dtype)) if dtype in ir.INT_DTYPES \
            else np.array(value, dtype=np.float64)
    return out


# What a stored array holds before a kernel writes it: a value no kernel computes by mistake.
_UNWRITTEN = {"float": np.nan, "int": np.iinfo(np.int64).min, "bool": False}


def _run_kernel(g, kp: KernelPlan, memory: dict, sizes: dict, outside: set) -> None:
    k, sched = kp.kernel, kp.schedule       # compiler/schedule.py: the planner's decisions
    for a in sched.across + sched.sums:   # a chain's products over its rows (sums): every
        t = ir.type_of(g, a.store)                 # block of rows adds its share (atomics)
        memory[a.store] = np.zeros(tuple(sizes[x] for x in t.axes))
    for n in k.stores:
        if n not in memory:
            t = ir.type_of(g, n)
            kind = ir.kind_of_dtype(t.dtype)
            memory[n] = elementwise.as_kind(np.full(tuple(sizes[a] for a in t.axes),
                                                    _UNWRITTEN[kind]), kind)
    if sched.engine == SCATTER:              # atomics at the gathered rows (scatter.py)
        scatter.run(_Block(g, kp, memory, Region(sizes), outside), memory, sizes)
        return
    # packed attention rows (compiler/packing.py) run whole: the rows are independent, and a
    # block of the flattened r x q is no box of r and q
    packed = dict(kp.model.packed)
    group = {a: n for a, n in sched.grouped().items() if a not in packed}
    axes = list(group)
    ranges = [[slice(i, min(i + group[a], sizes[a])) for i in range(0, sizes[a], group[a])]
              for a in axes]
    for tile in itertools.product(*ranges):
        region = Region(sizes, dict(zip(axes, tile)))
        _Block(g, kp, memory, region, outside).run()


class _Block(OtherPositions):
    def __init__(self, g, kp: KernelPlan, memory, region: Region, outside: set):
        self.g, self.kp, self.memory, self.region = g, kp, memory, region
        self.outside = outside      # gathers found reading outside an axis (reads.py)
        self.k = kp.kernel
        self.st = kp.model.streaming
        self.split = kp.schedule.split
        self.values: dict[tuple, tuple[np.ndarray, tuple[str, ...]]] = {}
        self.stats: dict[int, tuple] = {}     # softmax statistics finished in an earlier pass

    # -- evaluation of one node over the current region ---------------------------
    def _key(self, n: int, region: Region) -> tuple:
        """Cache key: the node and the slices of its own axes (a view asks for other slices)."""
        return (n,) + tuple((region.of(a).start, region.of(a).stop)
                            for a in ir.type_of(self.g, n).axes)

    def value(self, n: int, region: Region):
        """(array, axes) of node n over `region` (cached for nodes without the streamed axis)."""
        g = self.g
        axis = self.st.axis
        cacheable = axis is None or axis not in ir.type_of(g, n).axes
        key = self._key(n, region)
        if cacheable and key in self.values:
            return self.values[key]
        out = self._compute(n, region)
        if cacheable:
            self.values[key] = out
        return out

    def _compute(self, n: int, region: Region):
        g = self.g
        op, t = ir.op(g, n), ir.type_of(g, n)
        if n not in self.k.nodes or isinstance(op, ir.Input):
            data = self.memory[n][tuple(region.of(a) for a in t.axes)]
            return data, t.axes
        if isinstance(op, ir.View):
            return self._view(n, op, region), t.axes
        if isinstance(op, ir.Reshape):
            return self._reshape(n, region), t.axes
        if isinstance(op, ir.Scan):
            return self._scan(n, op, region)
        if isinstance(op, ir.Gather):
            return self._gather(n, op, region), t.axes
        r = self.st.axis
        if r is not None and isinstance(op, (ir.Reduce, ir.Contract)) and r in op.axes and \
                region.of(r) != slice(0, region.sizes[r]):
            # a reduction over the streamed axis read inside the chunk loop (through a gather or
            # a view, by a value stored per chunk), not a reducer's finished state: over the
            # whole axis, as the kernel's emitter computes it there from global memory
            return self._compute(n, region.with_(r, slice(0, region.sizes[r])))
        args = [self.value(m, region) for m in ir.operands(g, n)]
        kind = ir.kind_of_dtype(t.dtype)
        if isinstance(op, ir.Const):
            return elementwise.as_kind(op.value, kind), ()
        if isinstance(op, ir.Index):
            s = region.of(op.axis)
            return np.arange(s.start, s.stop, dtype=np.int64), (op.axis,)
        if isinstance(op, ir.SizeOf):
            return np.asarray(region.sizes[op.axis], dtype=np.int64), ()
        if isinstance(op, ir.Map):
            data = elementwise.apply(op.fn, [_align(v, t.axes) for v in args])
            full = tuple(region.extent(a) for a in t.axes)
            return np.broadcast_to(elementwise.as_kind(data, kind), full), t.axes
        if isinstance(op, ir.Assign):
            full = tuple(region.extent(a) for a in t.axes)
            return np.asarray(np.broadcast_to(_align(args[0], t.axes), full), order="C"), t.axes
        return self._reduction(n, region, args)

    def _reduction(self, n: int, region: Region, args):
        """A reduction over whole axes (not streamed here), split over threads if planned."""
        g = self.g
        op, t = ir.op(g, n), ir.type_of(g, n)
        split = self.split if self.split and self.split[0] in op.axes else None
        if isinstance(op, ir.Softmax):
            x, axes = _floats(args[0])
            dims = tuple(axes.index(a) for a in op.axes)
            if n in self.stats:
                if self._own_rows(n, region):     # normalise with the earlier pass's statistics
                    return acc.softmax_normalize(x, self.stats[n], dims, ir.empty_row(op)[0]), axes
                return self._whole_softmax(n, region)
            if split is None:
                return elementwise.softmax(x, dims, ir.empty_row(op)[0]), axes
            stats = fold_split(acc.SOFTMAX_STATS, x, axes, op.axes, split)
            return acc.softmax_normalize(x, stats, dims, ir.empty_row(op)[0]), axes
        if isinstance(op, ir.Reduce):
            x, axes = args[0] if op.fn in ir.INDEX_REDUCTIONS else _floats(args[0])
            dims = tuple(axes.index(a) for a in op.axes)
            if split is None:
                out = elementwise.reduce(op.fn, x, dims)
                if op.fn in ir.INDEX_REDUCTIONS:    # positions along the whole axis
                    out = np.where(out >= 0, out + region.of(op.axes[0]).start, out)
                return out, t.axes
            state = fold_split(acc.for_reduce(op.fn), x, axes, op.axes, split,
                                 region.of(split[0]).start)
            return acc.for_reduce(op.fn).finalize(state), t.axes
        assert isinstance(op, ir.Contract)
        if split is None:
            return _contract(args[0], args[1], t.axes), t.axes
        (a, aa), (b, ba) = args
        r, ways = split
        total = np.zeros(tuple(region.extent(x) for x in t.axes))
        for part in range(ways):
            pa = take(a, aa, r, part, ways)
            pb = take(b, ba, r, part, ways)
            total = total + _contract((pa, aa), (pb, ba), t.axes)
        return total, t.axes

    def _own_rows(self, n: int, region: Region) -> bool:
        """Whether `region` asks for the rows this block streamed softmax n's statistics over
        (a view may read the softmax at other rows: another block's, which it recomputes)."""
        t, op = ir.type_of(self.g, n), ir.op(self.g, n)
        return all(region.of(a) == self.region.of(a) for a in t.axes if a not in op.axes)

    def _whole_softmax(self, n: int, region: Region):
        """Softmax n at rows other than the block's: over the whole softmax axes, then cut."""
        op = ir.op(self.g, n)
        whole = {a: slice(0, region.sizes[a]) for a in op.axes}
        x, axes = _floats(self.value(ir.operands(self.g, n)[0],
                                     Region(region.sizes, {**region.slices, **whole})))
        out = elementwise.softmax(x, tuple(axes.index(a) for a in op.axes),
                                  ir.empty_row(op)[0])
        cut = tuple(slice(region.of(a).start, region.of(a).stop) if a in op.axes else slice(None)
                    for a in axes)
        return out[cut], axes

    # -- the block's schedule ----------------------------------------------------
    def run(self) -> None:
        g, k, st = self.g, self.k, self.st
        if st.axis is None:
            for n in k.stores:
                self._store(n, self.region)
            return
        r = st.axis
        pairs = dict(st.pairs)
        chunk = self.kp.schedule.stream[1]
        size = self.region.extent(r)
        for p in range(st.passes):
            states = {n: None for n, q in st.reducers if q == p}
            stats = {n: None for n, q in st.stats if q == p}
            # (an empty streamed axis: one empty chunk, the accumulators' identities finalized)
            for start in range(0, size, chunk) or range(1):
                region = self.region.with_(r, slice(start, min(start + chunk, size)))
                for n in states:
                    states[n] = self._update(n, states[n], region, pairs)
                for n in stats:
                    x, axes = _floats(self.value(ir.operands(g, n)[0], region))
                    dims = tuple(axes.index(a) for a in ir.op(g, n).axes)
                    shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
                    running = stats[n] or acc.SOFTMAX_STATS.init(shape, np.float64)
                    stats[n] = acc.SOFTMAX_STATS.update(running, x, dims)
                for n in k.stores:
                    if n in st.per_chunk[p] and r in ir.type_of(g, n).axes:
                        self._store(n, region)
            for n, state in states.items():
                self.values[self._key(n, self.region)] = (self._finalize(n, state, pairs),
                                                          ir.type_of(g, n).axes)
            self.stats.update(stats)
        for n in k.stores:
            if r not in ir.type_of(g, n).axes:
                self._store(n, self.region)

    def _split_for(self, axis):
        return self.split if self.split and self.split[0] == axis else None

    def _update(self, n: int, states, region: Region, pairs: dict):
        """Fold one chunk into reducer n's accumulators: one running state per thread share."""
        g = self.g
        op = ir.op(g, n)
        r = self.st.axis
        split = self._split_for(r)
        ways = split[1] if split else 1
        states = states or [None] * ways
        if isinstance(op, ir.Reduce):
            accumulator = acc.for_reduce(op.fn)
            x, axes = self.value(ir.operands(g, n)[0], region)
            x = x if op.fn in ir.INDEX_REDUCTIONS else elementwise.as_kind(x, "float")
            dims = tuple(axes.index(a) for a in op.axes)
            shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
            chunk = region.of(r)
            return [fold(accumulator, st if st is not None else accumulator.init(shape, np.float64),
                          take(x, axes, r, i, ways), dims,
                          np.arange(chunk.start, chunk.stop)[i::ways])
                    for i, st in enumerate(states)]
        assert isinstance(op, ir.Contract)
        soft = next((s for s, c in pairs.items() if c == n), None)
        if soft is not None:
            return self._online_softmax(n, soft, region, states, ways)
        a, b = (self.value(m, region) for m in ir.operands(g, n))
        out_axes = ir.type_of(g, n).axes
        out = []
        for i, st in enumerate(states):
            part = _contract((take(a[0], a[1], r, i, ways), a[1]),
                             (take(b[0], b[1], r, i, ways), b[1]), out_axes)
            out.append((part,) if st is None else (st[0] + part,))
        return out

    def _online_softmax(self, n: int, soft: int, region: Region, states, ways: int):
        """Update each thread share's online-softmax state (m, l, o) with one chunk."""
        g = self.g
        r = self.st.axis
        s_vals, s_axes = _floats(self.value(ir.operands(g, soft)[0], region))  # (integer scores)
        a_node, b_node = ir.operands(g, n)
        other = b_node if through(g, a_node) == soft else a_node
        v_vals, v_axes = self.value(other, region)
        soft_axes = ir.op(g, soft).axes
        rows = tuple(a for a in s_axes if a not in soft_axes)
        o_axes = self._o_axes(n, rows)
        order = [s_axes.index(a) for a in rows + soft_axes]
        moved = tuple(range(len(rows), len(order)))
        out = []
        for i, st in enumerate(states):
            s_rows = np.transpose(take(s_vals, s_axes, r, i, ways), order)
            vp = take(v_vals, v_axes, r, i, ways)
            if st is None:
                shape = s_rows.shape[:len(rows)]
                st = (np.full(shape, -np.inf), np.zeros(shape),
                      np.zeros(shape + tuple(region.extent(a) for a in o_axes[len(rows):])))

            def contract(p, vp=vp):
                back = np.transpose(p, np.argsort(order))
                return _contract((back, s_axes), (vp, v_axes), o_axes)

            out.append(acc.SOFTMAX_CONTRACT.update(st, s_rows, contract, moved))
        return out

    def _o_axes(self, n: int, rows: tuple[str, ...]) -> tuple[str, ...]:
        t_axes = ir.type_of(self.g, n).axes
        return rows + tuple(a for a in t_axes if a not in rows)

    def _finalize(self, n, states, pairs):
        """Merge the thread shares' states, then finish the reduction."""
        g = self.g
        op = ir.op(g, n)
        if isinstance(op, ir.Reduce):
            accumulator = acc.for_reduce(op.fn)
        elif n in pairs.values():
            accumulator = acc.SOFTMAX_CONTRACT
        else:
            accumulator = acc.SUM
        state = states[0]
        for other in states[1:]:
            state = accumulator.merge(state, other)
        if isinstance(op, ir.Reduce):
            return accumulator.finalize(state)
        if n in pairs.values():
            soft = next(s for s, c in pairs.items() if c == n)
            s_axes = ir.type_of(g, ir.operands(g, soft)[0]).axes
            rows = tuple(a for a in s_axes if a not in ir.op(g, soft).axes)
            o_axes = self._o_axes(n, rows)
            masked, none = ir.empty_row(ir.op(g, soft))     # (a row of no position: none)
            empty = masked if all(self.region.sizes[a] for a in ir.op(g, soft).axes) else none
            out = acc.SOFTMAX_CONTRACT.finalize(state, empty)
            return np.transpose(out, [o_axes.index(a) for a in ir.type_of(g, n).axes])
        return state[0]

    def _store(self, n: int, region: Region) -> None:
        g = self.g
        t = ir.type_of(g, n)
        data, axes = self.value(n, region)
        data = _align((data, axes), t.axes)
        full = tuple(region.extent(a) for a in t.axes)
        at = tuple(region.of(a) for a in t.axes)
        if any(a.store == n for a in self.kp.schedule.across + self.kp.schedule.sums):
            self.memory[n][at] += np.broadcast_to(data, full)     # this block's rows' share
            return
        self.memory[n][at] = np.broadcast_to(data, full)


def _contract(a, b, out_axes):
    return labelled.contract(labelled.Labelled(a[0], tuple(a[1])), labelled.Labelled(b[0], tuple(b[1])),
                             tuple(out_axes))
