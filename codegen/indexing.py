"""Array layouts in C: row-major offsets (Horner form), tiles, and the index width.

The index type of a kernel is decided by range analysis: the largest value
any offset expression can take (every index at its maximum, sizes as planned)
must stay below 2^31 for `int`, otherwise the kernel indexes with `long long`.
A launch with larger sizes than planned is refused by the launcher rather
than overflowing.
"""

from __future__ import annotations

from .builder import Ix

INT_MAX = 2**31 - 1


def index_type(arrays, sizes: dict[str, int], margin: int = 1, overshoot: int = 0) -> str:
    """'int' when every offset (and every loop counter) fits, else 'long long'.

    `overshoot`: how far past an axis's size an index may run before a bound stops it (a
    tile's tail, a chunk loop's last step): sizes within it of 2^31 need 64 bits."""
    largest = 0
    for axes in arrays:
        count = 1
        for a in axes:
            count *= max(1, sizes[a])
        largest = max(largest, count * margin)
    for a, s in sizes.items():
        largest = max(largest, s * margin + overshoot)
    return "int" if largest <= INT_MAX else "long long"


class Layout:
    """Offsets into an array stored row-major over `axes`.

    With `extents` and `origins` it describes a tile: the local offset of a
    position is computed from its distance to the tile's origin.
    """

    def __init__(self, axes, sizes: dict[str, str], itype: str, extents=None, origins=None):
        self.axes = tuple(axes)
        self.sizes = sizes
        self.itype = itype
        self.extents = extents or {a: sizes[a] for a in axes}
        self.origins = origins or {}

    def offset(self, scope: dict[str, Ix], local: bool = False) -> str:
        if not self.axes:
            return "0"
        expr = None
        for a in self.axes:
            i = scope[a].expr
            if local and a in self.origins:
                i = f"({i} - {self.origins[a]})"
            extent = self.extents[a] if local else self.sizes[a]
            expr = f"({self.itype})({i})" if expr is None else f"({expr}) * ({extent}) + ({i})"
        return expr

    def count(self) -> str:
        return " * ".join(f"({self.extents[a]})" for a in self.axes) or "1"

    def unflatten(self, var: str, stream_axis: str | None, chunk_len: str):
        """Global coordinates of element `var` of the tile (last axis fastest), and validity."""
        coords, checks = {}, []
        rest = var
        for a in reversed(self.axes):
            local = f"(({rest}) % ({self.extents[a]}))"
            rest = f"(({rest}) / ({self.extents[a]}))"
            origin = self.origins.get(a)
            coords[a] = f"({origin} + {local})" if origin else local
            if a == stream_axis:
                checks.append(f"{local} < {chunk_len}")
            checks.append(f"{coords[a]} < {self.sizes[a]}")
        return coords, " && ".join(checks) or "true"
