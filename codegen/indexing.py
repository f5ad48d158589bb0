"""Array layouts in C: row-major offsets (Horner form) and tiles, in the kernel's index type
(compiler/index_width.py decides it, in the schedule)."""

from __future__ import annotations

import math

from ..compiler.pitch import pitch_of
from .builder import Ix


def tiles_along(size: str, tile: int, ctype: str) -> str:
    """The tiles of `tile` positions along an axis of `size` (a C expression or a number), in
    the block index's type `ctype` (a number where the size is one)."""
    if size.isdigit():
        return str(-(-int(size) // tile))
    return f"((({ctype})({size}) + {tile - 1}) / {tile})" if tile > 1 else f"(({ctype})({size}))"


def tile_count(along: list[str], ctype: str) -> str:
    """The product of the tiles along each axis (`along`), its numbers one constant."""
    known = math.prod(int(n) for n in along if n.isdigit())
    return " * ".join([f"({ctype}){known}"] + [n for n in along if not n.isdigit()])


def pitch(size: str, values: int) -> str | None:
    """The row pitch (C) of rows `size` values long padded to a multiple of `values`
    (compiler/pitch.py: a number where the size is one), None where the rows are dense."""
    if values <= 1:
        return None
    if size.isdigit():
        found = pitch_of(int(size), values)
        return None if found == int(size) else str(found)
    return f"((({size}) + {values - 1}) / {values} * {values})"


class Layout:
    """Offsets into an array stored row-major over `axes`.

    With `extents` and `origins` it describes a tile: the local offset of a
    position is computed from its distance to the tile's origin. `aligned`: each origin is
    the block's own (a multiple of the extent, of a tile that starts inside the array:
    KernelLowering._origins), which `inside` reasons from.
    """

    def __init__(self, axes, sizes: dict[str, str], itype: str, extents=None, origins=None,
                 aligned: bool = False, peel=None, pitch: str | None = None):
        self.axes = tuple(axes)
        self.sizes = sizes
        self.itype = itype
        self.extents = extents or {a: sizes[a] for a in axes}
        self.origins = origins or {}
        self.aligned = aligned
        # a tile whose rows are copied peeled (compiler/copies.py): (its rows' pitch, a
        # function of a scope giving the head of the scope's row); a local offset steps
        # rows by the pitch and adds the row's head
        self.peel = peel
        # the array's rows `pitch` values apart in global memory (compiler/pitch.py; None:
        # its last axis's size): a global offset steps rows by it
        self.pitch = pitch

    def inside(self, a: str) -> bool:
        """Whether every position of the tile along `a` is inside the array, so that its
        in-range test is true and left out: the whole axis (extent = size), or a block's
        tile of one position (its origin is below the size: the grid has ceil(size / tile)
        tiles) or one that divides a static size."""
        extent, size = self.extents[a], self.sizes[a]
        if a not in self.origins:
            return extent == size
        return self.aligned and (extent == "1" or extent.isdigit() and size.isdigit()
                                 and int(size) % int(extent) == 0)

    def offset(self, scope: dict[str, Ix], local: bool = False) -> str:
        if not self.axes:
            return "0"
        expr = None
        peel = self.peel if local else None
        for a in self.axes:
            i = scope[a].expr
            if local and a in self.origins:
                i = f"({i} - {self.origins[a]})"
            extent = self.extents[a] if local else self.sizes[a]
            if peel and a == self.axes[-1]:
                extent = peel[0]
            elif not local and self.pitch and a == self.axes[-1]:
                extent = self.pitch
            expr = f"({self.itype})({i})" if expr is None else f"({expr}) * ({extent}) + ({i})"
        return f"{expr} + {peel[1](scope)}" if peel else expr

    def stride(self, a: str) -> str:
        """The global offset between positions of axis `a` one apart (C, in the index type):
        the product of the sizes after it, the last one the rows' pitch; "" for the last."""
        after = self.axes[self.axes.index(a) + 1:]
        steps = [self.pitch if self.pitch and x == self.axes[-1] else self.sizes[x] for x in after]
        return " * ".join(f"({self.itype})({s})" for s in steps)

    def count(self) -> str:
        return " * ".join(f"({self.extents[a]})" for a in self.axes) or "1"

    def unflatten(self, var: str, stream_axis: str | None, chunk_len: str):
        """Global coordinates of element `var` of the tile (last axis fastest), and validity
        (an in-range test `inside` proves true left out). The element's position along each
        axis is divided out unsigned (`var` is never negative, and below the tile's count:
        a shift and a mask by a power of two, no sign's correction)."""
        coords, checks = {}, []
        rest = f"(unsigned)({var})"
        for a in reversed(self.axes):
            local = f"({self.itype})(({rest}) % ({self.extents[a]}))"
            rest = f"(({rest}) / ({self.extents[a]}))"
            origin = self.origins.get(a)
            coords[a] = f"({origin} + {local})" if origin else local
            if a == stream_axis:     # (the chunk's length ends at the array's end)
                checks.append(f"{local} < {chunk_len}")
            elif not self.inside(a):
                checks.append(f"{coords[a]} < {self.sizes[a]}")
        return coords, " && ".join(checks) or "true"
