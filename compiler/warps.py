"""What the two tensor-core searches share (tensorcore.py: products, flash.py: attention):
the fragment, which block-level hints they can honour, and the cheapest tiling that fits
(every candidate costed in one vectorised evaluation)."""

from __future__ import annotations

from .cost import Choice, Choices, Cost, evaluate
from .pick import fastest, fits
from .model import Model
from .target import Target

FRAGMENT = (16, 8, 16)                     # m, n, k of mma.sync.m16n8k16


def block_hints(fixed: dict, red: str, tiled: tuple[str, ...], batch: tuple[str, ...]):
    """(hinted group sizes, hinted chunk or None) when the hints leave room for a tensor-core
    tiling, else None: thread-level hints, another streamed axis, a group hint on an axis
    the tiling does not group or a batch axis grouped by more than 1 keep the kernel SIMT."""
    if any(key in fixed for key in ("thread", "split", "inner")):
        return None
    if "stream" in fixed and fixed["stream"][0] != red:
        return None
    hinted = dict(fixed.get("group", {}))
    if any(a not in tiled + batch or (a in batch and v != 1) for a, v in hinted.items()):
        return None
    return hinted, fixed["stream"][1] if "stream" in fixed else None


def matches(hint: int | None, tile, size: int):
    """A block tile (or a chunk) honours a group (or stream) hint: equal, or both cover the
    whole axis (per entry of an array of tiles; hints.fixed_for has cut a hint past the axis
    to its size, so `stream x by 64` at x = 41 takes a chunk of 64 or more)."""
    if hint is None:
        return True
    return (tile == hint) | ((hint >= size) & (tile >= size))


def pow2_at_least(size: int, least: int) -> int:
    """The tile that covers an axis of this size: a power of two, at least `least`."""
    return max(least, 1 << (max(size, 1) - 1).bit_length())


def cheapest(model: Model, cols, target: Target, sizes: dict, candidates: Choices, ties,
             cost: Cost | None = None, among=True):
    """The fastest (Choice, Cost) of a candidate set of tilings whose footprint fits every
    level (shared memory with padded rows and both stages, a warp's registers), or None.
    `ties`: arrays breaking equal times, the first deciding first (smallest wins, then the
    earliest candidate), after the compute time: of two tilings a memory bound predicts
    equal, the one whose pipes have more slack (fewer barriers, fewer copies) wins. `cost`:
    the set's costs when already evaluated; `among`: the candidates to choose from (per
    candidate; all by default)."""
    cost = cost if cost is not None else evaluate(model, cols, candidates, sizes, target,
                                                  fitting=True)
    if cost is None:                 # (no tiling's footprint fits)
        return None
    best = fastest(cost, fits(cost) & among, (cost.compute_time, *ties), candidates.shape)
    if best is None:
        return None
    one = candidates.at(best)
    warps = dict(one.warps)
    choice = tiled_choice(dict(one.group), sizes, one.stream, dict(one.thread), warps,
                          tuple(warps), one.reread, one.instruction)
    return choice, cost.at(best, candidates.shape)


def tiled_choice(group: dict, sizes: dict, stream: tuple, thread: dict, warps: dict,
                 keep: tuple[str, ...], reread: bool = False,
                 instruction: str = "mma.sync") -> Choice:
    """A tensor-core Choice: group sizes (whole axes dropped, except the fragment axes in
    `keep`, whose tile the lowering needs), the streamed chunk, warp tiles and warps,
    whether attention re-reads Q from shared memory, and the MMA instruction."""
    kept = {a: v for a, v in group.items() if v < sizes[a] or a in keep}
    return Choice(tuple(sorted(kept.items())), stream, tuple(sorted(thread.items())),
                  warps=tuple(sorted(warps.items())), reread=reread, instruction=instruction)


__all__ = ["FRAGMENT", "block_hints", "matches", "pow2_at_least", "cheapest", "tiled_choice",
           "Cost"]
