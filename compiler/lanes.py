"""How the lanes of a split walk their axis on the CUDA cores: unrolled or in a loop.

A CUDA-core kernel may split one reduced axis over `ways` adjacent lanes (Schedule.split).
Where the axis's size is fixed by the diagram, a multiple of the lanes, and each lane makes
at most UNROLL_TRIPS trips along it, the lowering walks it unrolled, each trip at a constant
offset from the lane (codegen/held.py): a value a thread reads at one trip is named once and
shared by the thread's points (its rows), and the thread holds its rows' slices of what does
not move along the streamed axis. Otherwise the walk is a loop, and each point walks it for
itself. The lowering reads `trips`; the cost model (issue_simt.py) prices the same rule over
a set of candidates with `unrolled`.
"""

from __future__ import annotations

import numpy as np

from . import ir

UNROLL_TRIPS = 8       # trips a lane makes along the split axis at a point, unrolled
# the ops the lowering walks their axes for (loops over whole axes, codegen/scalar.py)
WALKS = (ir.Contract, ir.Reduce, ir.Softmax)


def trips(size: int | None, ways: int) -> int | None:
    """The trips each lane makes along a split axis of `size` positions (None: not fixed by
    the diagram) over `ways` lanes where the lowering unrolls its walk, else None."""
    if size is None or ways < 2 or size % ways:
        return None
    t = size // ways
    return t if t <= UNROLL_TRIPS else None


def unrolled(size, ways, fixed: bool):
    """Per candidate (NumPy arrays of ways broadcast): whether the walk is unrolled (trips)."""
    ways = np.asarray(ways, dtype=float)
    if not fixed:
        return np.zeros(np.shape(ways), dtype=bool)
    return (ways >= 2) & (np.mod(size, ways) == 0) & (size / ways <= UNROLL_TRIPS)


def whole_walks(g, kernel, st, held=()) -> frozenset:
    """Reduced axes of `kernel` the lanes may not split (Model.whole_walks): where a value
    the thread holds in registers over the axis (a streamed reduction's result, a streamed
    softmax's row statistics, a reduction `held` before the loop: codegen/registers.py) is
    read by a reduction over the axis nested in another reduction over it. The outer one
    walks the axis with the lanes' stride; the inner one then walks the whole axis in each
    lane (codegen/scalar._walk), where each lane holds its share of the value only
    (accum.extent_of): it would be computed again from its operands at every position of
    the walk, a cost the model does not see (self-attention's gradient at t=37: Q over m
    again at each score of O's loop over d). Splitting another axis, or none, holds the
    value whole in each lane. The search splits none of these axes, the schedule refuses
    such a split (--lanes), the lowering checks it (codegen/registers.py)."""
    members = set(kernel.nodes)
    values_of = {n: _held_axes(g, n, stats)
                 for stats, pairs in ((False, st.reducers), (True, st.stats)) for n, _ in pairs}
    values_of.update((n, _held_axes(g, n, isinstance(ir.op(g, n), ir.Softmax))) for n in held)
    stops = set(values_of) | set(kernel.loads)
    streamed = {n for n, _ in st.reducers}
    walkers = [n for n in kernel.nodes if isinstance(ir.op(g, n), WALKS)]
    out = set()
    for a in kernel.reduced(g):
        values = {n for n, axes in values_of.items() if a in axes}
        outer = [n for n in walkers if a in ir.op(g, n).axes]
        inner = [r for r in outer if values and _reads(g, r, values, a, members, stops)]
        if any(r != o and _nested(g, o, r, members, stops, st.axis if o in streamed else None)
               for r in inner for o in outer):
            out.add(a)
    return frozenset(out)


def _held_axes(g, n: int, stats: bool) -> set:
    """The axes of held value n (a softmax's statistics: its rows)."""
    axes = set(ir.type_of(g, n).axes)
    return axes - set(ir.op(g, n).axes) if stats else axes


def _reads(g, r: int, values: set, a: str, members: set, stops: set) -> bool:
    """Whether reduction r reads one of `values` at its own walk of `a` (through ops that
    keep `a`)."""
    todo, seen = list(ir.operands(g, r)), set()
    while todo:
        m = todo.pop()
        if m in values:
            return True
        if m in seen or m not in members or m in stops or a not in ir.type_of(g, m).axes:
            continue
        seen.add(m)
        todo.extend(ir.operands(g, m))
    return False


def _nested(g, outer: int, r: int, members: set, stops: set, streamed: str | None) -> bool:
    """Whether reduction r is computed inside the walk of reduction `outer` (reached from
    its operands through ops that vary along what it walks: those that do not are computed
    before its loop, scalar.Emitter._hoist)."""
    op = ir.op(g, outer)
    point = set(ir.type_of(g, outer).axes) - set(op.axes) | ({streamed} if streamed else set())
    todo, seen = list(ir.operands(g, outer)), set()
    while todo:
        m = todo.pop()
        if m in seen or m not in members or m in stops or \
                set(ir.type_of(g, m).axes) <= point:
            continue
        if m == r:
            return True
        seen.add(m)
        todo.extend(ir.operands(g, m))
    return False
