"""The candidate a cost set prefers: the fastest whose footprint fits every level, equal
times broken deterministically (compiler/search.py, warps.py and tensorcore.py choose by
these over the candidate sets compiler/cost.py evaluates)."""

from __future__ import annotations

import numpy as np

from .choices import entries


def fastest(cost, ok, ties, shape: tuple[int, ...]) -> int | None:
    """The fastest candidate where `ok`, as an index into the candidate set flattened to
    `shape`, or None when none is: times equal to 15 decimals are broken by `ties` (terms
    that broadcast to `shape`; the first decides first, the smallest wins, then the
    earliest candidate), so the search is deterministic."""
    import os
    tol = float(os.environ.get("NAPKIN_TIE", "0"))
    time = np.round(np.broadcast_to(np.where(ok, cost.time, np.inf), shape).ravel(), 15)
    tied = np.flatnonzero(time <= time.min() * (1 + tol))
    if tol and len(tied) > 1:
        h = np.broadcast_to(cost.levels[1].H, shape).ravel()[tied]
        tied = tied[h <= h.min() * (1 + 1e-12)]
        t2 = time[tied]
        tied = tied[t2 == t2.min()]
    if time[tied[0]] == np.inf:
        return None
    if len(tied) == 1:
        return int(tied[0])
    where = np.unravel_index(tied, shape)
    keys = [np.broadcast_to(entries(t, where), tied.shape) for t in reversed(ties)]
    return int(tied[np.lexsort(keys)[0]])


def fits(cost):
    """Whether every level's footprint fits its capacity (per candidate for a candidate set)."""
    ok = True
    for lc in cost.levels[1:]:
        ok = ok & (lc.M <= lc.capacity)
    return ok
