"""How the lanes of a split walk their axis on the CUDA cores: unrolled or in a loop.

A CUDA-core kernel may split one reduced axis over `ways` adjacent lanes (Schedule.split).
Where the axis's size is fixed by the diagram, a multiple of the lanes, and each lane makes
at most UNROLL_TRIPS trips along it, the lowering walks it unrolled, each trip at a constant
offset from the lane (codegen/held.py): a value a thread reads at one trip is named once and
shared by the thread's points (its rows), and the thread holds its rows' slices of what does
not move along the streamed axis. Otherwise the walk is a loop, and each point walks it for
itself. The lowering reads `trips`; the cost model (issue_simt.py) prices the same rule over
a set of candidates with `unrolled`.
"""

from __future__ import annotations

import numpy as np

UNROLL_TRIPS = 8       # trips a lane makes along the split axis at a point, unrolled


def trips(size: int | None, ways: int) -> int | None:
    """The trips each lane makes along a split axis of `size` positions (None: not fixed by
    the diagram) over `ways` lanes where the lowering unrolls its walk, else None."""
    if size is None or ways < 2 or size % ways:
        return None
    t = size // ways
    return t if t <= UNROLL_TRIPS else None


def unrolled(size, ways, fixed: bool):
    """Per candidate (NumPy arrays of ways broadcast): whether the walk is unrolled (trips)."""
    ways = np.asarray(ways, dtype=float)
    if not fixed:
        return np.zeros(np.shape(ways), dtype=bool)
    return (ways >= 2) & (np.mod(size, ways) == 0) & (size / ways <= UNROLL_TRIPS)
