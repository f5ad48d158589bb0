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
every row's setup for a vector or two (`row_copy`: a split's merge over partials laid out
[p_c r], 256 rows of 2 values; attention's chunk of 8 keys by 64 in a block of 256).
Decided here, once, from the sizes the plan is made for; the lowering and the cost model read it (Schedule.vectors,
issue_simt). A plan may run at other sizes than it was made for (smaller ones fit its
index width): where the inner axis's size is a runtime parameter, the kernel tests it once
per copy and copies one value at a time where it is not a multiple (codegen/staging.py).

Peeling (`peeled`, Schedule.peels): where no vector divides the row's size (cross_entropy's
v = 50257, a softmax of 77 values a warp), the rows start at addresses no vector width
divides, so a row of at least PEEL_MIN vectors, where that issues less than a value a copy
(`row_copy`), is copied 16 bytes at a time all the same, peeled: the
row is laid out in shared memory `peel_pitch` values apart (a vector more than its length,
rounded up) and shifted by its head `hd`, its start's distance in values past the 16-byte
aligned address before it (computed from the row's address at run time, once a row: an
offset pointer, a view's, is handled alike), so that global and shared addresses agree
modulo 16 bytes; its aligned middle is copied 16 bytes a copy, the values before the first
aligned one (the head) and after the last whole vector (the tail) one a lane, zeros past
the row's valid length. The reads of the tile add the row's head (codegen/indexing.Layout).
"""

from __future__ import annotations

import numpy as np

from . import ir
from .choices import multiple_of, prod
from .model import BYTES, storage_dtype
from .pitch import pitch_of

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
# ... and a peeled row (codegen/peeled.py): its head from the row's address, its first
# aligned value and its whole vectors, and one more round of values (the head's and the
# tail's, one a lane): COPY_PEEL per row beyond the vector copy's COPY_ROW(_ONCE) + COPY_EACH
# (static SASS, sm_90: cross_entropy's row copy of a 256-value chunk at t = 4096, 64
# instructions a row peeled at v = 50257 against 23 aligned at v = 50256)
COPY_PEEL = 41
PEEL_MIN = 4     # vectors a row must hold at least to be peeled (shorter: value by value)


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


def width(axes, held: dict, sizes: dict, nbytes: int, threads: int,
          known: bool = False) -> tuple[int, bool]:
    """(values one copy moves, whether the rows are peeled) (see the module docstring);
    `known`: the row's length is a constant (a chunk, a tile less than the axis, a fixed
    size: issue_simt._copy's `static`)."""
    inner = inner_axis(axes, held)
    if inner is None or axes[-1] != inner:
        return 1, False
    rows = 1
    for a in axes[:axes.index(inner)]:
        rows *= held[a]
    w, peel, _ = row_copy(rows, held[inner], int(sizes[inner]), nbytes, threads, True, known,
                          True)
    # (a runtime size is tested again in the kernel: staging.stage)
    return int(w), bool(peel)


def row_copy(rows, length, size, nbytes: int, threads, last=True, static=False, constant=True):
    """(values one copy moves, whether the rows are peeled, warp instructions per warp of the
    copy) of a tile of `rows` rows of `length` values along an array's axis `size` long, its
    last where `last` (numbers, or arrays per candidate; `static`, `constant`: see `costs`):
    the widest vector `vector_values` allows, else, where `peeled` allows, 16 bytes a copy
    peeled where that issues less than a value a copy; one value a copy where the tile is
    copied flat. The one decision Schedule.vectors records and issue_simt._copy prices."""
    width = np.where(last, vector_values(size, length, nbytes), 1) if nbytes \
        else np.ones_like(length)                                  # (0 bytes: draw's table)
    rowed, each, short = costs(rows, length, width, threads, static & last, constant)
    plain = np.where(short, each, rowed)
    peel = last & peeled(size, length, nbytes) if nbytes else False
    if np.any(peel):
        rowed_p, _, short_p = costs(rows, length, 16 // nbytes, threads, static & last,
                                    constant, True)
        peel = peel & ~short_p & (rowed_p < plain)
        width = np.where(peel, 16 // nbytes, width)
        plain = np.where(peel, rowed_p, plain)
    width = np.where(short, 1, width)
    return width, peel, plain


def peeled(size, length, nbytes: int):
    """Whether rows `size` values long (the array's contiguous axis) of which a tile holds
    `length` are copied peeled (module docstring): no vector divides the size, the values
    are 2 or 4 bytes and the tile's row holds PEEL_MIN 16-byte vectors (numbers, or arrays
    per candidate)."""
    if nbytes not in (2, 4):
        return np.zeros(np.shape(length), bool) if np.ndim(length) else False
    return (np.asarray(vector_values(size, length, nbytes)) == 1) & \
        (np.asarray(length) >= PEEL_MIN * 16 // nbytes)


def peel_pitch(length, w: int):
    """Values a peeled row takes in shared memory: its length rounded up to a multiple of the
    vector's `w` values, and one vector more (room for a head of up to w - 1 values)."""
    return np.ceil(np.asarray(length) / w) * w + w


def costs(rows, length, width, threads, static=False, constant=True, peel=False):
    """(warp instructions per warp of the copy row by row, of the copy over its flat index,
    whether it is copied flat), of a tile of `rows` rows of `length` values (the cost
    model prices the copy `row_copy` chooses: issue_simt._copy); `static`: the length is a
    constant along the array's last axis (a row of one round is then an `if`:
    COPY_ROW_ONCE); `constant`: the length is a constant at all (a tile or chunk less than
    the axis, a fixed size). A row as long as a runtime size is copied row by row whatever
    its length (staging.stage flattens a tile of constant extents only: its coordinates
    divided out by constants), so only a constant length may be copied flat. `peel`: the
    rows are peeled (`peeled`: `width` is then 16 bytes' values; COPY_PEEL more a row)."""
    rounds = np.ceil(length / (width * threads))
    rowed = rows * (np.where(np.asarray(static) & (rounds == 1), COPY_ROW_ONCE, COPY_ROW) +
                    rounds * COPY_EACH + np.where(np.asarray(peel), COPY_PEEL, 0))
    each = np.ceil(rows * length / threads) * COPY_FLAT
    return rowed, each, np.asarray(constant) & (rows > 1) & (length < threads) & \
        ((width == 1) | (each <= rowed))


def vectors(g, staged, tile: dict, stream, sizes: dict, threads: int,
            fixed=frozenset()) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """((node, values per copy) of every staged input of a CUDA-core kernel, the nodes whose
    rows are peeled); `fixed`: the axes of a fixed size (Model.fixed)."""
    out, peels = [], []
    for n in sorted(staged):
        axes = ir.type_of(g, n).axes
        held = extents(axes, tile, stream, sizes)
        inner = inner_axis(axes, held)
        known = inner is not None and (stream is not None and inner == stream[0] or
                                       inner in fixed or held[inner] < sizes[inner])
        w, peel = width(axes, held, sizes, BYTES[storage_dtype(g, n)], threads, known)
        out.append((n, w))
        if peel:
            peels.append(n)
    return tuple(out), tuple(peels)


# A tensor-core block's copies of a tile (codegen/tiles.py), per warp, counted in the SASS of
# the library's matmul and attention main loops (sm_90, benchmarks/model_check.py): `t`
# rounds of the block's threads, one copy each, cost TENSOR_SETUP + t TENSOR_EACH where
# every thread keeps one column of vectors and steps down the rows (tiles._copy_rows: the
# thread's first source and destination, then per copy its row test, the select of its
# src-size and a constant step; the loop from tid of before cost 15 + 31 t) ...
TENSOR_SETUP = 10
TENSOR_EACH = 6
# ... TENSOR_INDEXED more a round where the threads are no multiple of a row's copies (the
# element's row and column from its index by a constant division, its address computed
# anew: attention at d = 36 and 40, 8 and 16 bytes over rows padded to 48, some 12 a round
# in the SASS) ...
TENSOR_INDEXED = 6
# ... and TENSOR_VALUE more a round copying one value (rows no vector divides: an odd head,
# d = 37; a runtime size the kernel's test finds no multiple of 8, matmul at k = 77): the
# 64-bit address, LDG, the select of the value or zero, STS.U16, the rolled loop (SASS: 25
# a round stepping down the rows, matmul's A at k = 77; 30 and 31 by index, attention's K
# and V at d = 37, matmul's B).
TENSOR_VALUE = 19
# ... a tile of f32 values rounded to 16 bits as it is staged (tensorcore._rounded: a hidden
# activation, a cotangent) is loaded 16 bytes at a time into registers, packed in pairs and
# stored 8 bytes at a time (its row's index, test, 64-bit address, LDG, two F2FP, STS per
# 16 bytes; fitted to mlp's second product, sm_90)
TENSOR_ROUNDED = 12


def tensor_copies(model, loads, chunk: dict, level1: dict, sizes: dict, threads,
                  narrow: bool, joined: bool) -> list:
    """(load, warp instructions per warp of one copy of its tile, LSU instructions per warp
    of it: LDGSTS, or LDG and STS a value, copies per thread) of every load a tensor-core
    block copies into shared memory (`loads`: issue.tiles's (load, bytes of its tile)), at
    the width `tensor_values` decides. `narrow`: the products run in 16 bits (an f32 tile
    is rounded as it is staged); `joined`: the kernel tests its runtime sizes once for all
    its tiles (codegen/mma.py, wgmma.py: where one fails, every tile with a test copies one
    value at a time; FlashAttention and the chains test each tile's copy)."""
    found = []
    for a, tile in loads:
        held = {x: chunk.get(x, level1[x]) for x in a.axes}
        rounded = narrow and a.bytes == 4 and len(a.axes) >= 2
        if a.bytes == 4 and not rounded or not a.bytes:    # (a 4-byte vector: tiles.
            found.append((a, tile / 16, 1, 1, False, rounded))   # _copy_vector, 16 bytes a
            continue                                             # copy as charged; 0: draw)
        values, inner, extent, tested = tensor_values(a, held, sizes, model.fixed,
                                                      model.padded, rounded,
                                                      dict(model.pitches).get(a.node, 0))
        rows = prod(held[x] for x in a.axes if x != inner)
        found.append((a, rows, extent, values, tested, rounded))
    failed = False
    for a, rows, extent, values, tested, rounded in found:
        if joined and tested:
            failed = failed | (np.asarray(values) == 1)
    out = []
    for a, rows, extent, values, tested, rounded in found:
        if joined and tested:
            values = np.where(failed, 1, values)
        per_row = np.ceil(extent / values)
        rounds = np.ceil(rows * per_row / threads)
        one = (np.asarray(values) == 1) & ((a.bytes < 4) | rounded)
        each = np.where(rounded, TENSOR_ROUNDED, TENSOR_EACH) + \
            np.where(np.mod(threads, per_row) != 0, TENSOR_INDEXED, 0) + \
            np.where(one, TENSOR_VALUE, 0)
        out.append((a, TENSOR_SETUP + rounds * each, rounds * np.where(one | rounded, 2, 1),
                    rounds))
    return out


def row_widths(extent, sizes, nbytes: int, narrower: bool = True):
    """(values of a 16-byte copy where the rows allow one, else 0; values of the copy where
    they do not) of a tensor-core tile's rows `extent` values long (a number, or an array
    per candidate) along the array's contiguous axis, `sizes` the lengths of the rows it
    copies from (the axis's; a split window's or a gather's base's too), each a number or
    None (a runtime size, which the kernel tests: here taken to pass). The one decision
    codegen/tiles.py emits (`_aligned`, `_narrow`) and the model charges (`tensor_values`):
    16 bytes where the extent and every size are multiples of 16 bytes' values; else, where
    every size is known and `narrower` (no tile rounded to 16 bits as it is staged), the
    widest of `vector_values` that all allow; else one value."""
    wide = 16 // nbytes
    ok = np.mod(extent, wide) == 0
    for s in sizes:
        if s is not None:
            ok = ok & (s % wide == 0)
    known = [s for s in sizes if s is not None]
    narrow = 1
    if narrower and known and len(known) == len(sizes):
        narrow = np.minimum.reduce([np.asarray(vector_values(s, extent, nbytes))
                                    for s in known])
    return (int(wide * ok) if np.ndim(ok) == 0 else np.where(ok, wide, 0)), \
        (int(narrow) if np.ndim(narrow) == 0 else narrow)


def tensor_values(a, held: dict, sizes: dict, fixed, padded, rounded: bool, pitch: int = 0):
    """(values one copy moves, the tile's inner axis, the extent a row of the tile covers
    along it, whether a runtime size test decides it) of a tensor-core block's tile of load
    `a` (`held`: each axis's extent in the tile, numbers or arrays per candidate), as
    codegen/tiles.py copies it at these sizes (`row_widths`): the tile's inner axis is the
    last it holds more than one position of, padded where the site pads it (headpad.py);
    rows along another axis than the array's contiguous one are copied a value at a time. A
    runtime size's test fails where no 16-byte copy fits: the kernel copies one value at a
    time (with no test: `vector_values`' 8 or 4 bytes where they fit). (A split window's or
    a gather's base rows are taken to be the axis's own.) `pitch`: the array's rows are padded
    to a multiple of it (compiler/pitch.py): they start aligned at any size, no test."""
    axes = [x for x in a.axes if not np.all(np.asarray(held[x]) == 1)]
    if not axes:
        return 1, None, 1, False
    inner = axes[-1]            # (headpad.padded_extent: headpad reads this module)
    extent = next((e for n, x, e in padded if n == a.node and x == inner), held[inner])
    if inner != a.axes[-1]:
        return 1, inner, extent, False
    size = pitch_of(int(sizes[inner]), pitch)
    constant = inner in fixed or pitch > 1
    wide, _ = row_widths(extent, [size], a.bytes)
    _, narrow = row_widths(extent, [size if constant else None], a.bytes, not rounded)
    return np.where(wide > 0, wide, narrow), inner, extent, not constant


def vector_values(size: int, extent, nbytes: int):
    """Values one copy moves along rows `size` values long (the array's contiguous axis) of
    which a tile holds `extent` (a multiple of the width where the rows start at one: a
    padded head's zeros past `size`): the widest of VECTOR_BYTES that both are multiples of,
    else 1 (`extent` a number, or an array per candidate). A row starts at a multiple of
    size x nbytes bytes from the array's 16-byte aligned start, so a vector at a multiple
    of the width is aligned as cp.async and the loads need (d = 36 f16: 72-byte rows,
    8-byte copies; d = 18: 4-byte ones)."""
    out = 1
    for vb in reversed(VECTOR_BYTES):
        w = vb // nbytes
        if w >= 2 and vb % nbytes == 0:
            out = np.where(multiple_of(extent, w) & multiple_of(size, w), w, out)
    return int(out) if np.ndim(out) == 0 else out
