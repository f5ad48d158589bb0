"""What a gathered read of a load really fetches: its table's unique values from HBM, and
per block the values its positions reach, the rest hits in L1.

A gather of a load (`B[h (clip(x - q) + 8)]`, T5's relative-position bias; `X[b (t - k) c]`,
a convolution's shifted taps) is modelled as an array over its positions' axes, one value
per point: read per point from global memory where it is used (the emitted code's loads go
through L1 and L2). Two facts bound what crosses each level:

- `unique`: HBM delivers each of the table's values at most once, however often the
  positions repeat (the L2 level's rule, docs/cost-model.md: the rest are re-loads);
- `block_reads`: a block (per chunk of a streamed axis) fetches from L2 at most the values
  its positions reach over its ranges, a product over the table's axes of each position's
  span (`t - k` over a block's g_t rows and k taps: g_t + k - 1 rows, not g_t * k); its
  other reads of them hit the block's L1 (the register level's reads, charged there).

`table` records, for the model (Model.arrays' `Array.table`), the table's axes and each
position: the axis it is read along (a renaming) or its index expression
(masking._expr's tuples), None where it is read from data (`E[tok[t] m]`: no span known).
"""

from __future__ import annotations

import numpy as np

from . import ir
from .choices import prod


def table(g, n: int, base: int) -> tuple:
    """((table axis, position), ...) of gather n of load `base`: a position is
    ("label", axis) for a renaming, an index expression, or None (read from data)."""
    from .masking import _expr
    op, positions = ir.op(g, n), iter(ir.operands(g, n)[1:])
    out = []
    for axis, label in zip(ir.type_of(g, base).axes, op.labels):
        out.append((axis, ("label", label) if label is not None else _expr(g, next(positions))))
    return tuple(out)


def unique(arr, once, sizes: dict, passes, symbolic: bool):
    """The values of load `arr` that cross from HBM at least once: a gather's at most its
    table's (`Array.table`), the rest re-reads (memory.l2_split: L2 where they fit)."""
    if not arr.table or symbolic:
        return once
    return np.minimum(once, prod(sizes[a] for a, _ in arr.table) * passes)


def block_reads(arr, vol, res: dict, cov: dict, blocks, sizes: dict):
    """What blocks fetch of gather `arr` from L2 (values): at most, per block and chunk
    (`res`: the extents it holds at once, `cov`: over its lifetime), the values its
    positions reach (`_reach`), each once; `vol` (the points read) where that is less."""
    reach = _reach(arr, res, sizes)
    if reach is None:
        return vol
    chunks = prod(cov[a] / res[a] for a in arr.axes)
    return np.minimum(vol, blocks * chunks * reach)


def _reach(arr, res: dict, sizes: dict):
    """The values of the table one block reads over extents `res` of the gather's axes (the
    span of each position, from a box in the middle of the axes: clamps such as
    `maximum(t - k, 0)` narrow it at an edge only), None where a position is read from data."""
    from .fractions import _interval
    box = {}        # (each end an array where the extent is one per candidate: both alike)
    for a in arr.axes:
        lo = np.floor(sizes[a] / 2) + 0 * np.asarray(res[a], dtype=float)
        box[a] = (lo, lo + res[a] - 1)
    out = 1
    for axis, pos in arr.table:
        if pos is None:
            return None
        if pos[0] == "label":
            span = res.get(pos[1], sizes[axis])
        else:
            try:
                lo, hi = _interval(pos, box, sizes)
            except KeyError:        # (an axis the gather's result lacks: no box for it)
                return None
            span = np.floor(hi) - np.ceil(lo) + 1
        out = out * np.clip(span, 1, sizes[axis])
    return out
