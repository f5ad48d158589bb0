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
