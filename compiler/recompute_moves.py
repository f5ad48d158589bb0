"""Recomputation's exchange move: a statement a kernel stores, moved with what it needs into
another kernel that computes some of the same.

Duplications and merges (recompute.py) only grow kernels, and the best of them first is
myopic: the backward of attention at d = 128 (h100, b = 4, h = 16, q = x = 4096) reaches dV
and dK computed together from the recomputed scores and dS and dQ alone (5.01 ms, model)
where dQ's kernel adding dK across its blocks of queries and dV alone is 4.88 ms: from the
first, no duplication or merge leads to the second, since dK is owned by the kernel it
should leave. A move takes statement `s` out of kernel B (which keeps the rest, pruned to
what it still stores) into kernel C together with the statements of B it is computed from,
which C recomputes (the ones B still needs stay B's). Only once kernels overlap (as merges),
into kernels sharing some of `s`'s computation, and never emptying B (that is a merge).
"""

from __future__ import annotations

from .clusters import _splits_apart


def moves(lay, layout):
    """(grown kernel, layout) for every statement a kernel of `layout` owns and stores (B
    keeping others) moved into each other kernel computing some of what it needs."""
    if not any(copies for _, copies in layout):
        return
    needed = lay.needed(layout)
    for bi, (b, bcopies) in enumerate(layout):
        owned = b - bcopies
        if len(owned) < 2:
            continue
        for s in sorted(owned):
            stored = [n for n in lay.stmts[s] if n in needed[bi]]
            if not stored:
                continue
            add = lay.upstream(b, stored)
            shared = add - {s}
            for ci, (c, ccopies) in enumerate(layout):
                if ci == bi or not shared & c:
                    continue
                grown = c | add
                if _splits_apart(lay.g, grown):
                    continue
                new = list(layout)
                new[bi] = (b - {s}, bcopies)
                new[ci] = (grown, (ccopies - {s}) | (add - c - {s}))
                cand = lay.pruned(tuple(new))
                if lay.valid(cand):
                    yield grown, cand


__all__ = ["moves"]
