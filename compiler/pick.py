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
# Among them (equal bytes), one issuing at most 1/SLOTS of the fastest's issue slots wins: a
# difference of that size the model does resolve. softmax at r = 130, c = 77 (h100): 32
# lanes over c predicted 3.290 us against 3.287 us over 64 (each lane's second value, the
# merge across two warps), issue slots 0.071 against 0.138 us (model), 0.073 against 0.149 us
# in its SASS (static, benchmarks/model_check.py's estimate).
SLOTS = 1.5


def fastest(cost, ok, ties, shape: tuple[int, ...]) -> int | None:
    """The fastest candidate where `ok`, as an index into the candidate set flattened to
    `shape`, or None when none is. Candidates predicted within `NEAR` of the fastest are a
    near tie, which the one moving the fewest bytes through global memory wins (the
    paper's criterion, H at the first level below it), then the fastest of those, unless
    some issue at most 1/SLOTS of its issue slots: the fastest of those then; times
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
        tied = _fewer_slots(cost, shape, tied, time)
    if len(tied) == 1:
        return int(tied[0])
    where = np.unravel_index(tied, shape)
    keys = [np.broadcast_to(entries(t, where), tied.shape) for t in reversed(ties)]
    return int(tied[np.lexsort(keys)[0]])


def _fewer_slots(cost, shape, tied, time):
    """Of near-tied candidates, the fastest; or, where some issue at most 1/SLOTS of its issue
    slots (Cost.compute_parts' "issue"), the fastest of those."""
    first = tied[time[tied] == time[tied].min()]
    issue = dict(getattr(cost, "compute_parts", ())).get("issue")
    if issue is None:
        return first
    slots = np.broadcast_to(issue, shape).ravel()
    fewer = tied[slots[tied] * SLOTS <= slots[first].min()]
    if len(fewer) == 0:
        return first
    return fewer[time[fewer] == time[fewer].min()]


def fits(cost):
    """Whether every level's footprint fits its capacity (per candidate for a candidate set)."""
    ok = True
    for lc in cost.levels[1:]:
        ok = ok & (lc.M <= lc.capacity)
    return ok
