"""The index ranges a block (and a chunk) of a plan covers, and the labelled-array helpers
the schedule interpreter reads values with (runtime/interpret.py, runtime/reads.py)."""

from __future__ import annotations

import numpy as np

from . import elementwise, labelled


class Region:
    """The slice of every axis a block (and a chunk) covers."""

    def __init__(self, sizes: dict[str, int], slices: dict[str, slice] | None = None):
        self.sizes = sizes
        self.slices = dict(slices or {})

    def of(self, axis: str) -> slice:
        return self.slices.get(axis, slice(0, self.sizes[axis]))

    def extent(self, axis: str) -> int:
        s = self.of(axis)
        return s.stop - s.start

    def with_(self, axis: str, s: slice) -> "Region":
        return Region(self.sizes, {**self.slices, axis: s})


def _floats(val):
    """(array, axes) with the array as float64: what every reduction but argmax/argmin reads."""
    return elementwise.as_kind(val[0], "float"), val[1]


def _align(val, axes: tuple[str, ...]) -> np.ndarray:
    """(array, axes) in the order of `axes`, size 1 where it lacks one."""
    return labelled.Labelled(val[0], tuple(val[1])).aligned(tuple(axes))
