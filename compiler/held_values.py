"""Reductions a CUDA-core thread computes once, before a pass of its streamed loop, and holds
in registers (Model.held_values).

A kernel streaming an axis r evaluates what each position of the stream needs inside the
position's body (codegen/kernel.py). A reduction without r read there (self-attention's
Q = X Wq fused with its scores and streamed over the keys: Q over m at the lane's share of
d; a softmax's row statistics over the keys in a kernel streaming d) would be computed again
at every position, while the cost model prices each op once (model._work). Such a
reduction (a contraction, a reduction, a softmax's statistics) computed from the kernel's
loads and the streamed states of earlier passes (nothing along r), whose axes other than
the woven ones the diagram fixes (a softmax: of its rows; at most HELD values a point), is
computed once at the start of the first pass after those states, into a register array over
those axes (the lanes' share of a split one: Registers.compute_held), where the emitter
finds it as it finds a streamed reduction's result (codegen/registers.py). One computed
after the last pass is the epilogue's, computed there once. The lowering reads this
decision; lanes.whole_walks counts these values among those the thread holds.
"""

from __future__ import annotations

import math

from . import ir

HELD = 64       # values of one held reduction a point holds, at most (its non-woven axes)


def held(g, kernel, st, woven=None) -> tuple[tuple[int, int], ...]:
    """(reduction, the pass it is computed before) of `kernel` streaming `st.axis` (above;
    `woven`: kernel.woven(g) where the caller has it)."""
    r = st.axis
    if r is None:
        return ()
    members, woven = set(kernel.nodes), set(kernel.woven(g) if woven is None else woven)
    states = dict(st.reducers)
    stops = set(states) | {n for n, _ in st.pairs} | {n for n, _ in st.stats}
    sizes = {a: info.size for a, info in g.graph["axes"].items()}
    out = []
    for n in kernel.nodes:
        op = ir.op(g, n)
        if n in stops or not (isinstance(op, (ir.Contract, ir.Softmax)) or (
                isinstance(op, ir.Reduce) and op.fn not in ir.INDEX_REDUCTIONS)):
            continue
        axes = ir.type_of(g, n).axes
        extra = [a for a in axes if a not in woven and
                 not (isinstance(op, ir.Softmax) and a in op.axes)]
        if r in axes or r in op.axes or any(sizes.get(a) is None for a in extra) or \
                math.prod(sizes[a] for a in extra) > HELD:
            continue
        after = _after(g, n, members, states, stops, r)
        if after is not None and after < st.passes:
            out.append((n, after))
    return tuple(out)


def _after(g, n: int, members: set, states: dict, stops: set, r: str) -> int | None:
    """The first pass n can be computed before: after the streamed states it reads (0: from
    the kernel's loads alone); None where it reads along the streamed axis."""
    todo, seen, after = list(ir.operands(g, n)), set(), 0
    while todo:
        m = todo.pop()
        if m in seen or m not in members:
            continue
        seen.add(m)
        if r in ir.type_of(g, m).axes or (m in stops and m not in states):
            return None
        if m in states:
            after = max(after, states[m] + 1)
            continue
        todo.extend(ir.operands(g, m))
    return after
