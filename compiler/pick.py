"""The candidate a cost set prefers: the fastest whose footprint fits every level, equal
times broken deterministically (compiler/search.py, warps.py and tensorcore.py choose by
these over the candidate sets compiler/cost.py evaluates)."""

from __future__ import annotations

import numpy as np

from .choices import entries

# Predicted times closer than this (relative) are below what the model resolves (its rates
# and latencies are assumptions of a few percent at best, to calibrate on a GPU): among
# them the tiling that moves fewer bytes wins. FlashAttention's backward at d = 64 (b=4,
# h=16, q=x=4096, h100): the dK, dV chain over 256 keys a block predicted 1131 us against
# 1130 us over 128, and reads Q and dO half as often (H 1.24 GB against 2.35 GB).
NEAR = 0.005


def fastest(cost, ok, ties, shape: tuple[int, ...]) -> int | None:
    """The fastest candidate where `ok`, as an index into the candidate set flattened to
    `shape`, or None when none is. Candidates predicted within `NEAR` of the fastest are a
    near tie, which the one moving the fewest bytes through global memory wins (the
    paper's criterion, H at the first level below it), then the fastest of those; times
    equal to 15 decimals are then broken by `ties` (terms that broadcast to `shape`; the
    first decides first, the smallest wins, then the earliest candidate), so the search
    is deterministic."""
    time = np.round(np.broadcast_to(np.where(ok, cost.time, np.inf), shape).ravel(), 15)
    least = time.min()
    if least == np.inf:
        return None
    tied = np.flatnonzero(time <= least * (1 + NEAR))
    if len(tied) > 1:
        moved = np.broadcast_to(cost.levels[1].H, shape).ravel()[tied]
        tied = tied[moved <= moved.min() * (1 + 1e-12)]
        tied = tied[time[tied] == time[tied].min()]
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
