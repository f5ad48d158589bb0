"""The fastest wgmma tiling of a product site (compiler/wgmma.py: the rules; kernel_plan keeps
the faster of this and mma.sync's tensorcore.search)."""

from __future__ import annotations

import numpy as np

from . import warps
from .cost import Choices
from .wgmma import ROWS, tilings


def search(g, model, cols, target, sizes: dict, s, fixed: dict):
    """The fastest wgmma tiling of a product site that fits and honours the block-level hints
    (as tensorcore.search's for mma.sync), or None."""
    hints = warps.block_hints(fixed, s.red, (s.row, s.col), s.batch)
    if hints is None:
        return None
    hinted, chunk = hints
    top = [warps.pow2_at_least(sizes[a], f) for a, f in ((s.row, 16), (s.col, 8))]
    found = tilings(g, s, *top)
    bm, bn, bk, wg, _ = found.T
    keep = warps.matches(hinted.get(s.row), bm, sizes[s.row]) & \
        warps.matches(hinted.get(s.col), bn, sizes[s.col]) & warps.matches(chunk, bk, sizes[s.red])
    keep = np.broadcast_to(keep, bm.shape)
    if not keep.any():
        return None
    bm, bn, bk, wg = (v[keep] for v in (bm, bn, bk, wg))
    ones = tuple((a, 1) for a in s.batch)
    candidates = Choices(group=((s.row, bm), (s.col, bn)) + ones, stream=(s.red, bk),
                         thread=((s.row, float(ROWS)), (s.col, bn)) + ones,
                         warps=((s.row, wg), (s.col, 1.0)), instruction="wgmma")
    return warps.cheapest(model, cols, target, sizes, candidates, (-(bm * bn), bk, wg))


__all__ = ["search"]
