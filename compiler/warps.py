"""What the two tensor-core searches share (tensorcore.py: products, flash.py: attention):
the fragment, which block-level hints they can honour, and the cheapest tiling that fits."""

from __future__ import annotations

from .cost import Choice, Cost, evaluate
from .model import Model
from .search import fits
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


def matches(hint: int | None, tile: int, size: int) -> bool:
    """A block tile honours a group hint: equal, or both cover the whole axis."""
    return hint is None or tile == hint or (hint >= size and tile >= size)


def pow2_at_least(size: int, least: int) -> int:
    """The tile that covers an axis of this size: a power of two, at least `least`."""
    return max(least, 1 << (max(size, 1) - 1).bit_length())


def cheapest(model: Model, cols, target: Target, sizes: dict, candidates):
    """The fastest (Choice, Cost) among (Choice, tie-break key) candidates whose footprint
    fits every level (shared memory with padded rows and both stages, a warp's registers),
    or None."""
    best = None
    for choice, tie in candidates:
        cost = evaluate(model, cols, choice, sizes, target)
        if not fits(cost):
            continue
        key = (round(cost.time, 15),) + tuple(tie)
        if best is None or key < best[0]:
            best = (key, choice, cost)
    return None if best is None else (best[1], best[2])


def tiled_choice(group: dict, sizes: dict, stream: tuple, thread: dict, warps: dict,
                 keep: tuple[str, ...]) -> Choice:
    """A tensor-core Choice: group sizes (whole axes dropped, except the fragment axes in
    `keep`, whose tile the lowering needs), the streamed chunk, warp tiles and warps."""
    kept = {a: v for a, v in group.items() if v < sizes[a] or a in keep}
    return Choice(tuple(sorted(kept.items())), stream, tuple(sorted(thread.items())),
                  warps=tuple(sorted(warps.items())))


__all__ = ["FRAGMENT", "block_hints", "matches", "pow2_at_least", "cheapest", "tiled_choice",
           "Cost"]
