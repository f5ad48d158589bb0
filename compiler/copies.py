"""How a CUDA-core block copies each staged input into shared memory: how many values one
copy moves (a 16-, 8- or 4-byte vector, or one value).

The copy walks the tile row by row (codegen/staging.py): its inner axis is the last one
the tile holds more than one position of, its rows every position of the axes before it.
A row is copied `width` values at a time when every vector lies wholly inside or wholly
outside the array and is aligned in global and in shared memory: the inner axis is the
array's contiguous (last) one, and its size and its extent in the tile (a block tile, a
chunk or the whole axis) are multiples of the width (the row starts, the chunk and tile
origins and the valid length of every row are then multiples of it; the launchers align
every array to 16 bytes, codegen/program.Program.alignment). A tile of several rows each
shorter than the block's threads is copied one value at a time over its flat index
(staging._flat) where the model prices that below the row walk, in which every warp issues
every row's setup for a vector or two (`flat`: a split's merge over partials laid out
[p_c r], 256 rows of 2 values; attention's chunk of 8 keys by 64 in a block of 256).
Decided here, once, from the sizes the plan is made for; the lowering and the cost model read it (Schedule.vectors,
issue_simt). A plan may run at other sizes than it was made for (smaller ones fit its
index width): where the inner axis's size is a runtime parameter, the kernel tests it once
per copy and copies one value at a time where it is not a multiple (codegen/staging.py).
"""

from __future__ import annotations

import numpy as np

from . import ir
from .model import BYTES, storage_dtype

VECTOR_BYTES = (16, 8, 4)
# What a copy issues (compiler/issue_simt.py charges it; counted in, or fitted to, the SASS
# of the library's CUDA-core kernels, sm_90, static):
# A staged input's copy (codegen/staging.py) walks its tile row by row: per row and warp its
# source, destination and valid length (the row's coordinates divided out once, its tests),
# and the remainder nvcc peels off the unrolled copy loop (counted once, static): 55 in
# rmsnorm's and layernorm's row loops at 4096 (87 with the 4x-unrolled copy loop inside,
# 32); a row copied by a single round (`if (tid < n)`: softmax's and cross_entropy's chunks
# of 256 f16 values, 32 vectors for 32 threads) issues some 20.
COPY_ROW = 40
# ... of which a contiguous row (along the array's last axis) of a constant length copied in
# one round (no loop to set up or peel: its source, destination and test; a row along another
# axis steps by a product of runtime sizes, COPY_ROW; rope's rows of 16 vectors and
# cross_entropy's chunks of 32,
# static SASS 23-24 a row with its copy, COPY_EACH; 40 was read off the one-value version
# nvcc lays out first, which the estimate paired with it until sass_align._wide)
COPY_ROW_ONCE = 16
# ... then per round of the block's threads one copy of `width` values a thread (16, 8 or 4
# bytes where compiler/copies.py allows, else one value): the compare with the row's valid
# length, LDG, STS and the loop's step, 8 per round in the 4x-unrolled loop (32 for 4;
# rmsnorm, layernorm at 4096: 16 rounds of 16-byte copies a row).
COPY_EACH = 8
# ... and a tile whose rows are shorter than the threads copies value by value over its flat
# index (its coordinates by constant divisions), some 20 per value and lane.
COPY_FLAT = 20


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


def width(axes, held: dict, sizes: dict, nbytes: int, threads: int) -> int:
    """Values one copy moves (see the module docstring)."""
    inner = inner_axis(axes, held)
    if inner is None or axes[-1] != inner:
        return 1
    rows = 1
    for a in axes[:axes.index(inner)]:
        rows *= held[a]
    w = vector_values(int(sizes[inner]), held[inner], nbytes)
    # (a runtime size is tested again in the kernel: staging.stage)
    return 1 if w > 1 and flat(rows, held[inner], w, threads) else w


def vector_values(size: int, extent: int, nbytes: int) -> int:
    """Values one copy moves along rows `size` values long (the array's contiguous axis) of
    which a tile holds `extent` (a multiple of the width where the rows start at one: a
    padded head's zeros past `size`): the widest of VECTOR_BYTES that both are multiples of,
    else 1. A row starts at a multiple of size x nbytes bytes from the array's 16-byte
    aligned start, so a vector at a multiple of the width is aligned as cp.async and the
    loads need (d = 36 f16: 72-byte rows, 8-byte copies; d = 18: 4-byte ones)."""
    for vb in VECTOR_BYTES:
        w = vb // nbytes
        if w >= 2 and vb % nbytes == 0 and extent % w == 0 and size % w == 0:
            return w
    return 1


def flat(rows, length, width, threads):
    """Whether a tile of `rows` rows of `length` values is copied value by value over its flat
    index rather than row by row `width` values a copy: rows shorter than the threads, where
    that issues no more (COPY_* above per warp; numpy arrays: per candidate)."""
    return costs(rows, length, width, threads)[2]


def costs(rows, length, width, threads, static=False):
    """(warp instructions per warp of the copy row by row, of the copy over its flat index,
    whether it is copied flat: `flat`), of a tile of `rows` rows of `length` values (the
    cost model prices the copy `flat` chooses: issue_simt._copy); `static`: the length is a
    constant (a row of one round is then an `if`: COPY_ROW_ONCE)."""
    rounds = np.ceil(length / (width * threads))
    rowed = rows * (np.where(np.asarray(static) & (rounds == 1), COPY_ROW_ONCE, COPY_ROW) +
                    rounds * COPY_EACH)
    each = np.ceil(rows * length / threads) * COPY_FLAT
    return rowed, each, (rows > 1) & (length < threads) & ((width == 1) | (each <= rowed))


def vectors(g, staged, tile: dict, stream, sizes: dict,
            threads: int) -> tuple[tuple[int, int], ...]:
    """(node, values per copy) of every staged input of a CUDA-core kernel."""
    out = []
    for n in sorted(staged):
        axes = ir.type_of(g, n).axes
        out.append((n, width(axes, extents(axes, tile, stream, sizes), sizes,
                             BYTES[storage_dtype(g, n)], threads)))
    return tuple(out)


def tensor_copies(model, a, tile, sizes: dict):
    """Copies a tensor-core block issues for its tile of load `a` (`tile`: the real bytes
    a block holds of it, issue.tiles), as codegen/tiles.py emits them: `vector_values`'
    16, 8 or 4 bytes each (a head of 36 or 20, 16-bit: 8), else one value, over the tile
    as padded in shared memory (headpad.py: the copies past the head write zeros), where
    its rows are a padded head (Model.padded); elsewhere 16 bytes."""
    inner = a.axes[-1] if a.axes else None
    size = sizes.get(inner) if inner is not None else None
    if size is None or np.ndim(size) or size != int(size):     # (a symbolic size: 16)
        return tile / 16
    extent = next((e for n, x, e in model.padded if n == a.node and x == inner), None)
    if extent is None:      # (rows of another array: 16 bytes, as charged before heads were
        return tile / 16    # padded; at a size no multiple of 8 they run one value at a time)
    return tile * extent / size / (vector_values(int(size), int(extent), a.bytes) * a.bytes)
