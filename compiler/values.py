"""Which IR nodes hold the same values: an array looked through its names (`through`), and
two nodes that spell one computation twice (`same_values`). Read by canonical form (a
variance written `(X - mu) * (X - mu)`) and by masking (a gradient's logsumexp spelling
its forward softmax's argument again)."""

from __future__ import annotations

from .graph import DiGraph

from . import ir

# ops whose values are those of their operands under the op: one spelling, one value
_SAME_OP = (ir.Map, ir.Const, ir.Index, ir.SizeOf, ir.View, ir.Reduce)


def through(g: DiGraph, n: int) -> int:
    """The node an array really comes from, looking through named arrays (Assign)."""
    while isinstance(ir.op(g, n), ir.Assign) and ir.type_of(g, n).axes == \
            ir.type_of(g, ir.operands(g, n)[0]).axes:
        n = ir.operands(g, n)[0]
    return n


def same_values(g: DiGraph, a: int, b: int) -> bool:
    """Whether `a` and `b` hold the same values: one node through names, or one op of
    operands that do (the same result axes and dtype; constants by their repr: -0.0 is not
    0.0): an elementwise op, a view (`doc[t]`, a document id read along the queries) by its
    labels, or a reduction over the same axes. A gradient's logsumexp of the masked scores,
    `logsumexp[s](where(s <= t, S, -inf))`, spells again the argument of the forward's
    `softmax[s](where(s <= t, S, -inf))`; `(X - mean[c](X)) * (X - mean[c](X))` one
    difference twice: other nodes, the same values."""
    a, b = through(g, a), through(g, b)
    if a == b:
        return True
    op, ta, tb = ir.op(g, a), ir.type_of(g, a), ir.type_of(g, b)
    if not isinstance(op, _SAME_OP) or repr(op) != repr(ir.op(g, b)) or \
            ta.dtype != tb.dtype or set(ta.axes) != set(tb.axes):
        return False
    ua, ub = ir.operands(g, a), ir.operands(g, b)
    return len(ua) == len(ub) and all(same_values(g, u, v) for u, v in zip(ua, ub))
