"""A reduced axis split over `ways` threads, as the interpreter runs it: each thread takes a
strided part of the axis (as threads split a loop), folds it into its own accumulator state,
and the states merge with the accumulator's `merge` (the lanes' butterfly)."""

from __future__ import annotations

import numpy as np


def take(data, axes, axis, part, ways):
    """Thread `part` of `ways`'s share of `axis` (strided, as threads split a loop)."""
    if axis not in axes:
        return data
    index = [slice(None)] * len(axes)
    index[list(axes).index(axis)] = slice(part, None, ways)
    return data[tuple(index)]


def fold(accumulator, state, x, dims, positions):
    """accumulator.update, with the elements' positions along the axis for argmax/argmin."""
    if accumulator.positional:
        return accumulator.update(state, x, dims, positions)
    return accumulator.update(state, x, dims)


def fold_split(accumulator, x, axes, red_axes, split, start=0):
    """Accumulate x over red_axes, in `ways` strided parts merged as threads would (the split
    axis's positions start at `start`)."""
    dims = tuple(axes.index(a) for a in red_axes)
    shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
    positions = np.arange(start, start + x.shape[dims[0]])   # along the (one) axis of an argmax
    if split is None or split[0] not in red_axes:
        return fold(accumulator, accumulator.init(shape, np.float64), x, dims, positions)
    r, ways = split
    state = None
    for part in range(ways):
        xp = take(x, axes, r, part, ways)
        s = fold(accumulator, accumulator.init(shape, np.float64), xp, dims,
                  positions[part::ways])
        state = s if state is None else accumulator.merge(state, s)
    return state
