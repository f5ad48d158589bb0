"""Array layouts in C: row-major offsets (Horner form) and tiles, in the kernel's index type
(compiler/index_width.py decides it, in the schedule)."""

from __future__ import annotations

from .builder import Ix


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
