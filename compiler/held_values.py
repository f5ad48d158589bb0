"""Reductions a CUDA-core thread computes once, before its streamed loop, and holds in
registers (Model.held).

A kernel streaming an axis r evaluates what each position of the stream needs inside the
position's body (codegen/kernel.py). A reduction without r read there (self-attention's
Q = X Wq fused with its scores and streamed over the keys: Q over m at the lane's share of
d) would be computed again at every position, while the cost model prices each op once
(model._work). Such a reduction computed from the kernel's loads alone (no streamed state,
nothing along r), whose axes other than the woven ones the diagram fixes (at most HELD
values a point), is computed before the passes instead, into a register array over those
axes, the lanes' share of a split one (codegen/held.compute), where the emitter finds it as
it finds a streamed reduction's result (codegen/registers.py). The lowering reads this
decision; lanes.whole_walks counts these values among those the thread holds.
"""

from __future__ import annotations

import math

from . import ir

HELD = 64       # values of one held reduction a point holds, at most (its non-woven axes)


def held(g, kernel, st) -> tuple[int, ...]:
    """The reductions of `kernel` streaming `st.axis` held before the loop (see above)."""
    r = st.axis
    if r is None:
        return ()
    members, woven = set(kernel.nodes), set(kernel.woven(g))
    states = {n for n, _ in st.reducers} | {n for n, _ in st.pairs} | {n for n, _ in st.stats}
    sizes = {a: info.size for a, info in g.graph["axes"].items()}
    out = []
    for n in kernel.nodes:
        op = ir.op(g, n)
        if n in states or not (isinstance(op, ir.Contract) or (
                isinstance(op, ir.Reduce) and op.fn not in ir.INDEX_REDUCTIONS)):
            continue
        extra = [a for a in ir.type_of(g, n).axes if a not in woven]
        if r in ir.type_of(g, n).axes or r in op.axes or \
                any(sizes.get(a) is None for a in extra) or \
                math.prod(sizes[a] for a in extra) > HELD:
            continue
        if _from_loads(g, n, members, states, r):
            out.append(n)
    return tuple(out)


def _from_loads(g, n: int, members: set, states: set, r: str) -> bool:
    """Whether n is computed from the kernel's loads alone: no streamed state among the ops
    it reads in the kernel, none along the streamed axis."""
    todo, seen = list(ir.operands(g, n)), set()
    while todo:
        m = todo.pop()
        if m in seen or m not in members:
            continue
        seen.add(m)
        if m in states or r in ir.type_of(g, m).axes:
            return False
        todo.extend(ir.operands(g, m))
    return True
