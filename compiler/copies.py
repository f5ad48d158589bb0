"""How a CUDA-core block copies each staged input into shared memory: how many values one
copy moves (a 16-, 8- or 4-byte vector, or one value).

The copy walks the tile row by row (codegen/staging.py): its inner axis is the last one
the tile holds more than one position of, its rows every position of the axes before it.
A row is copied `width` values at a time when every vector lies wholly inside or wholly
outside the array and is aligned in global and in shared memory: the inner axis is the
array's contiguous (last) one, and its size and its extent in the tile (a block tile, a
chunk or the whole axis) are multiples of the width (the row starts, the chunk and tile
origins and the valid length of every row are then multiples of it; the launchers align
every array to 16 bytes, codegen/program.Program.alignment). Decided here, once, from the
sizes the plan is made for; the lowering and the cost model read it (Schedule.vectors,
issue_simt). A plan may run at other sizes than it was made for (smaller ones fit its
index width): where the inner axis's size is a runtime parameter, the kernel tests it once
per copy and copies one value at a time where it is not a multiple (codegen/staging.py).
"""

from __future__ import annotations

from . import ir
from .model import BYTES, storage_dtype

VECTOR_BYTES = (16, 8, 4)


def extents(axes, tile: dict, stream, sizes: dict) -> dict:
    """The positions of each axis a block's copy of an array over `axes` holds at once: a
    block tile, the chunk of the streamed axis, or the whole axis."""
    out = {}
    for a in axes:
        if a in tile:
            out[a] = int(tile[a])
        elif stream is not None and a == stream[0]:
            out[a] = int(stream[1])
        else:
            out[a] = int(sizes[a])
    return out


def inner_axis(axes, held: dict):
    """The axis a copy walks along its rows: the last with more than one position held (None
    where every extent is 1: one value)."""
    found = [a for a in axes if held[a] != 1]
    return found[-1] if found else None


def width(axes, held: dict, sizes: dict, nbytes: int) -> int:
    """Values one copy moves (see the module docstring)."""
    inner = inner_axis(axes, held)
    if inner is None or axes[-1] != inner:
        return 1
    for vb in VECTOR_BYTES:
        w = vb // nbytes
        if w >= 2 and vb % nbytes == 0 and held[inner] % w == 0 and int(sizes[inner]) % w == 0:
            return w           # (a runtime size is tested again in the kernel: staging.stage)
    return 1


def vectors(g, staged, tile: dict, stream, sizes: dict) -> tuple[tuple[int, int], ...]:
    """(node, values per copy) of every staged input of a CUDA-core kernel."""
    out = []
    for n in sorted(staged):
        axes = ir.type_of(g, n).axes
        out.append((n, width(axes, extents(axes, tile, stream, sizes), sizes,
                             BYTES[storage_dtype(g, n)])))
    return tuple(out)
