"""Arrays labelled by axis name, as the reference executor and the interpreter hold them:
alignment to another axis order (broadcasting by name), positional relabelling (a repeated
label takes the diagonal), and the einsum product of two labelled arrays."""

from __future__ import annotations

import numpy as np


class Labelled:
    """An array with its axis labels (dimension i is axis labels[i])."""

    __slots__ = ("data", "axes")

    def __init__(self, data: np.ndarray, axes: tuple[str, ...]):
        self.data, self.axes = data, axes

    def aligned(self, axes: tuple[str, ...]) -> np.ndarray:
        """View with dimensions in the order of `axes` (size 1 where this value lacks one)."""
        mine = [a for a in axes if a in self.axes]
        data = np.transpose(self.data, [self.axes.index(a) for a in mine]) if mine else self.data
        shape = [data.shape[mine.index(a)] if a in self.axes else 1 for a in axes]
        return data.reshape(shape)


def _ids(*label_lists) -> dict[str, int]:
    ids: dict[str, int] = {}
    for labels in label_lists:
        for a in labels:
            ids.setdefault(a, len(ids))
    return ids


def relabel(data: np.ndarray, labels: tuple[str, ...]) -> np.ndarray:
    """Positional relabelling; a repeated label takes the diagonal."""
    unique = tuple(dict.fromkeys(labels))
    if len(unique) == len(labels):
        return data
    ids = _ids(labels)
    return np.einsum(data, [ids[a] for a in labels], [ids[a] for a in unique])


def contract(a: Labelled, b: Labelled, out_axes: tuple[str, ...]) -> np.ndarray:
    """The product of a and b summed over the axes not in `out_axes`, in their order."""
    ids = _ids(a.axes, b.axes)
    return np.einsum(a.data, [ids[x] for x in a.axes], b.data, [ids[x] for x in b.axes],
                     [ids[x] for x in out_axes], optimize=False)
