"""Walks over the IR's consumers: what an array's values reach, and whether they are
attention's scores (a softmax normalises them). Read by canonical's distributivity and by
the 16-bit storage fusion anticipates (stored16.anticipated)."""

from __future__ import annotations

from .graph import DiGraph

from . import ir


def normalised(g: DiGraph, n: int) -> bool:
    """Whether n's values reach a softmax over one of its axes through elementwise ops only
    (attention's scores: QK-norm's rsqrt stays in the query and key FlashAttention loads)."""
    axes = set(ir.type_of(g, n).axes)
    return any(isinstance(ir.op(g, u), ir.Softmax) and set(ir.op(g, u).axes) & axes
               for u in downstream(g, n, (ir.Map, ir.Assign)))


def read_by_scores(g: DiGraph, n: int) -> bool:
    """Whether the array n computes (through names and views) is an operand of attention's
    scores, a contraction whose values a softmax normalises: QK-norm's `Qn`, which
    FlashAttention loads as it is (so a kernel stores it) and the backward's chains read
    again (`dK = dS * Qn`)."""
    root = _named(g, n)
    seen = set(_aliases(g, root))
    return any(isinstance(ir.op(g, c), ir.Contract) and normalised(g, c)
               for u in seen for c in g.successors(u))


def _named(g: DiGraph, n: int) -> int:
    """n through names and views (the array whose values they are)."""
    while _same(ir.op(g, n)):
        n = ir.operands(g, n)[0]
    return n


def _aliases(g: DiGraph, root: int):
    """root and the names and views that read it as they are, once each."""
    frontier, seen = [root], {root}
    while frontier:
        m = frontier.pop()
        yield m
        for u in g.successors(m):
            if u not in seen and _same(ir.op(g, u)):
                seen.add(u)
                frontier.append(u)


def _same(op) -> bool:
    """Whether op reads its operand's values as they are: a name without a declared dtype,
    a view relabelling each position once (not a diagonal)."""
    if isinstance(op, ir.View):
        return len(set(op.labels)) == len(op.labels)
    return isinstance(op, ir.Assign) and op.dtype is None


def downstream(g: DiGraph, n: int, passing: tuple):
    """The nodes n's values reach, once each, walking on through the ops of the types
    `passing` (names, views: the values themselves, or elementwise ops of them)."""
    frontier, seen = [n], set()
    while frontier:
        for u in g.successors(frontier.pop()):
            if u not in seen:
                seen.add(u)
                yield u
                if isinstance(ir.op(g, u), passing):
                    frontier.append(u)
