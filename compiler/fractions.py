"""The share of (block, chunk) pairs a masked kernel computes, per candidate tiling: the same
interval test the lowering makes (codegen/masks.py) on every pair (sampled evenly past 512
ranges per axis), and, for a mask read from integer inputs with values given for planning,
position by position as the kernel's prologue tests them (masks.data_span: the chunks from
the first to the last where the mask may hold, whole ones inside the block's run of
positions holding it needing no mask per score)."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np

from . import monotone, packing
from .masking import COMPARISONS as _CMP

SAMPLES = 512
# packing.spans's operations on arrays of block starts and ends
_NUMPY = SimpleNamespace(div=np.floor_divide, mod=np.mod, mul=lambda a, b: a * b,
                         same=np.equal, pick=np.where, last=lambda n: n - 1)
CELLS = 1 << 21          # (block, position) pairs a count by position looks at, at most


def data_inputs(expr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(inputs the mask reads with values given for planning, those without), by name."""
    leaves = _leaves(expr) if expr is not None else ()
    given = tuple(dict.fromkeys(lf[1] for lf in leaves if lf[3] is not None))
    return given, tuple(dict.fromkeys(lf[1] for lf in leaves if lf[3] is None
                                      and lf[1] not in given))


def axes_of(expr) -> tuple[str, ...]:
    """The axes whose index the expression reads, in a fixed order."""
    if expr[0] == "cut":
        return axes_of(expr[1])
    if expr[0] == "index":
        return (expr[1],)
    if expr[0] == "data":
        return tuple(sorted(set(expr[2])))
    if expr[0] in ("size", "const", "unknown"):
        return ()
    return tuple(sorted({a for e in expr[1:] for a in axes_of(e)}))


def computed_fraction(mask, sizes: dict, tiles: dict, what: str = "computed", packed=()):
    """The share of (block, chunk) pairs computed, per candidate: `tiles` gives each masked
    axis's extent per block (a grouped axis's tile, the streamed axis's chunk; a number or
    an array broadcasting to the candidates), an axis not in it is whole. 1.0 without a
    mask. `what="iterated"`: the share the chunk loop visits (the span of a mask read from
    data, codegen/masks.data_span; every chunk otherwise). `packed`: Model.packed, the
    fragment rows' axes packed into one (compiler/packing.py): a masked axis among them is
    tiled by the packed axis's blocks, its range in one the least to the greatest index of
    its rows (packing.spans), as the kernel's skip test bounds it."""
    if mask is None:
        return 1.0
    axes = _grid(axes_of(mask), packed)
    if not axes:
        return 1.0
    sizes = packing.sized(packed, sizes)
    values = [np.asarray(tiles.get(a, sizes[a]), dtype=float) for a in axes]
    shape = np.broadcast_shapes(*(v.shape for v in values))
    flat = np.stack([np.broadcast_to(v, shape).ravel() for v in values], axis=1)
    size_key = tuple(sorted((a, int(v)) for a, v in sizes.items()))
    # once per distinct combination of extents (candidates share most of them)
    distinct, inverse = np.unique(flat, axis=0, return_inverse=True)
    found = np.array([_fraction(mask, size_key, tuple(zip(axes, map(int, t))), what,
                                tuple(packed)) for t in distinct], dtype=float)
    out = found[inverse.reshape(-1)].reshape(shape)
    return out.item() if out.ndim == 0 else out


def _grid(axes, packed) -> tuple[str, ...]:
    """The axes a mask's blocks tile: each of `axes`, a packed one as the axis packing it."""
    of = {a: p for p, parts in packed for a in parts}
    return tuple(dict.fromkeys(of.get(a, a) for a in axes))


def cut_fraction(mask, sizes: dict, tiles: dict, packed=()):
    """The share of (block, chunk) pairs the mask cuts: computed, with the condition failing
    somewhere in them (the diagonal of causal attention), per candidate as
    `computed_fraction`; the rest of the computed pairs hold it everywhere (their scores
    need no mask). 1.0 without a mask (every pair evaluates whatever the kernel computes)."""
    if mask is None or not axes_of(mask):
        return 1.0
    return computed_fraction(("cut", mask), sizes, tiles, packed=packed)


def iterated_fraction(mask, sizes: dict, tiles: dict, axis: str | None = None, packed=()):
    """The share of (block, chunk) pairs the chunk loop visits (computed_fraction's): a mask
    read from data bounds it by its span (codegen/masks.data_span); a mask of indices, with
    the streamed `axis` given, by the first and the last chunk it may hold in
    (codegen/masks.index_span); otherwise every chunk. A mask read from data whose values
    are not given holds anywhere in that part, and the rest of it still bounds the span
    (varlen's `x <= q`: the kernel's last position is at most the block's last row), when
    `axis` is given."""
    return computed_fraction(mask, sizes, tiles, f"iterated:{axis}" if axis else "iterated",
                             packed)


def later_is_heavier(mask, sizes: dict, tiles: dict, stream: str, row: str) -> bool:
    """Whether the blocks of the later `row` tiles run more chunks than the earlier ones
    (a mask of indices bounding the chunk loop, codegen/masks.index_span: causal attention's
    last query tiles see every key), so that launching them first balances the last wave
    (FlashAttention's order). `tiles` as computed_fraction's."""
    if mask is None or spans(mask) or row not in axes_of(mask) or stream not in axes_of(mask):
        return False
    axes = axes_of(mask)
    size_key = tuple(sorted((a, int(v)) for a, v in sizes.items()))
    extents = tuple((a, int(np.asarray(tiles.get(a, sizes[a])).max())) for a in axes)
    return _fraction(mask, size_key, extents, f"trend:{stream}:{row}") > 0


def spans(mask) -> bool:
    """Whether the kernel of this mask bounds its chunk loop by data (codegen/masks.data_span
    emits its prologue where a leaf of the mask is an integer or boolean input)."""
    return mask is not None and bool(_leaves(mask))


def along_bytes(mask) -> int:
    """Bytes per position of the inputs a bounded loop's prologue reads along the streamed
    axis (codegen/masks.data_span reads each once per position and block, from L2)."""
    leaves = _leaves(mask) if mask is not None else ()
    return 4 * len({(lf[1], lf[2]) for lf in leaves if lf[4] in lf[2]})


@functools.lru_cache(maxsize=4096)
def _fraction(mask, size_key: tuple, extents: tuple, what: str = "computed",
              packed: tuple = ()) -> float:
    sizes, ext = dict(size_key), {a: max(int(e), 1) for a, e in extents}
    leaves = _leaves(mask)
    # with values for a leaf read along the streamed axis, the kernel tests the chunk's
    # positions one by one (codegen/masks.py): so does the count, position by position
    stream = next((lf[4] for lf in leaves if lf[3] is not None and lf[4] in lf[2]
                   and lf[4] in ext), None)
    counts = {a: -(-sizes[a] // e) for a, e in ext.items()}
    limit = {a: SAMPLES for a in ext}
    while stream and np.prod([min(counts[a], limit[a]) for a in ext]) * ext[stream] > CELLS:
        widest = max(ext, key=lambda a: min(counts[a], limit[a]))
        limit[widest] = max(1, min(counts[widest], limit[widest]) // 2)
    ranges = {}
    for a, e in ext.items():
        tiles = np.arange(0, sizes[a], e)
        if len(tiles) > limit[a]:
            tiles = tiles[np.linspace(0, len(tiles) - 1, limit[a]).astype(int)]
        ranges[a] = tiles
    order = [a for a in ext if a != stream] + ([stream] if stream else [])   # chunks last
    dims = [len(ranges[a]) for a in order] + ([ext[stream]] if stream else [])
    grids = np.meshgrid(*[np.arange(d) for d in dims], indexing="ij", sparse=True) \
        if dims else []
    box, tile_of, valid = {}, {}, True
    for i, a in enumerate(order):
        start = ranges[a][grids[i]].astype(float)
        tile_of[a] = (start // ext[a]).astype(int)
        if a == stream:
            point = start + grids[-1]
            valid = point < sizes[a]
            box[a] = (point, point)
        else:
            box[a] = (start, np.minimum(start + ext[a], sizes[a]) - 1)
    for p, parts in packed:         # (its packed axes: the least and greatest of its rows)
        if p in box:
            box.update(packing.spans(*box[p], parts, sizes, _NUMPY))
    for lf in leaves:
        box[lf] = _leaf_interval(lf, box, ext, tile_of, stream)
    shape = tuple(dims)
    if mask[0] == "cut":       # computed, and not held everywhere
        held, fails = _holds(mask[1], box, sizes), _fails(mask[1], box, sizes)
    else:
        held, fails = _holds(mask, box, sizes), True
    held = np.broadcast_to(held, shape) & np.broadcast_to(valid, shape)
    fails = np.broadcast_to(fails, shape) & np.broadcast_to(valid, shape)
    if what.startswith("trend:"):          # later `row` tiles' chunks over the earlier ones'
        _, along, row = what.split(":")
        if along not in order or row not in order or not grids:
            return 0.0
        some = np.moveaxis(np.broadcast_to(held, shape), order.index(along), -1)
        index = np.arange(some.shape[-1])
        first = np.where(some, index, some.shape[-1]).min(axis=-1, keepdims=True)
        last = np.where(some, index, -1).max(axis=-1, keepdims=True)
        runs = ((index >= first) & (index <= last)).sum(axis=-1)
        at = [a for a in order if a != along].index(row)
        runs = np.moveaxis(runs, at, 0).reshape(runs.shape[at], -1).mean(axis=1)
        half = len(runs) // 2
        return float(runs[len(runs) - half:].mean() - runs[:half].mean()) if half else 0.0
    if what.startswith("iterated") and not stream:
        along = what.partition(":")[2]
        if along not in order or not grids:
            return 1.0
        # the block runs the chunks from the first to the last the mask may hold in
        # (codegen/masks.index_span): per block, along the streamed axis's dimension
        some = np.moveaxis(np.asarray(held), order.index(along), -1)
        index = np.arange(some.shape[-1])
        first = np.where(some, index, some.shape[-1]).min(axis=-1, keepdims=True)
        last = np.where(some, index, -1).max(axis=-1, keepdims=True)
        return float(np.mean((index >= first) & (index <= last)))
    if stream:
        # the block runs the chunks from the first to the last holding a position where the
        # mask may hold (codegen/masks.data_span), each still tested as a whole without the
        # inputs read along the axis (causal's `x <= q` inside a document)
        some = held.any(axis=-1)
        index = np.arange(some.shape[-1])
        first = np.where(some, index, some.shape[-1]).min(axis=-1, keepdims=True)
        last = np.where(some, index, -1).max(axis=-1, keepdims=True)
        chunk = dict(box)
        chunk[stream] = (box[stream][0] - grids[-1],
                         np.minimum(box[stream][0] - grids[-1] + ext[stream], sizes[stream]) - 1)
        for lf in leaves:
            if stream in lf[2]:
                chunk[lf] = (-math.inf, math.inf)
        whole = np.broadcast_to(_holds(mask[1] if mask[0] == "cut" else mask, chunk, sizes),
                                shape)[..., 0]
        if what.startswith("iterated"):
            return float(np.mean((index >= first) & (index <= last)))
        held = (index >= first) & (index <= last) & whole
        # a whole chunk inside the block's run of positions where the mask holds for every
        # row needs no mask per score (masks.data_span's `run`); any other computed one does
        must = ~fails & np.broadcast_to(valid, shape)
        point = np.broadcast_to(box[stream][0], shape)
        mfirst = np.where(must, point, np.inf).min(axis=(-2, -1), keepdims=True)[..., 0]
        mlast = np.where(must, point, -1).max(axis=(-2, -1), keepdims=True)[..., 0]
        run = must.sum(axis=(-2, -1), keepdims=True)[..., 0] == mlast - mfirst + 1
        start = np.broadcast_to(box[stream][0] - grids[-1], shape)[..., 0]
        inside = run & (start >= mfirst) & (start + ext[stream] - 1 <= mlast) & \
            (start + ext[stream] <= sizes[stream])
        fails = ~inside
    if mask[0] == "cut":
        held = held & fails
    return float(np.mean(held)) if grids else 1.0


def _leaves(e) -> tuple:
    """The data leaves of a mask expression (with their values, or None), in order."""
    if not isinstance(e, tuple) or not e:
        return ()
    if e[0] == "data":
        return (e,)
    return tuple(dict.fromkeys(lf for x in e[1:] for lf in _leaves(x)))


def _leaf_interval(leaf, box: dict, ext: dict, tile_of: dict, stream):
    """(lo, hi) of a data leaf over each box of the grid, from its values: along the streamed
    axis at each position (its other axes one position each in the block, else unknown),
    else the least and greatest value over the block's ranges (the kernel's prologue)."""
    _, _, labels, ref, _ = leaf
    unknown = (-math.inf, math.inf)
    if ref is None or len(labels) != ref.values.ndim:
        return unknown
    values = ref.values
    if stream is not None and stream in labels:
        if any(ext.get(a, 1) > 1 for a in labels if a != stream):
            return unknown
        index = tuple(np.clip(box[a][0].astype(int), 0, values.shape[j] - 1)
                      for j, a in enumerate(labels))
        v = values[index].astype(float)
        return v, v
    lo = hi = values
    for j, a in enumerate(labels):
        starts = np.arange(0, values.shape[j], ext.get(a, values.shape[j]))
        lo = np.minimum.reduceat(lo, starts, axis=j)
        hi = np.maximum.reduceat(hi, starts, axis=j)
    index = tuple(np.clip(tile_of[a], 0, lo.shape[j] - 1) for j, a in enumerate(labels))
    return lo[index].astype(float), hi[index].astype(float)


def _interval(e, box: dict, sizes: dict):
    kind = e[0]
    if kind == "index":
        return box[e[1]]
    if kind == "data":
        return box[e]
    if kind == "size":
        return float(sizes[e[1]]), float(sizes[e[1]])
    if kind == "const":
        return float(e[1]), float(e[1])
    if kind == "neg":
        lo, hi = _interval(e[1], box, sizes)
        return -hi, -lo
    if kind in monotone.FUNCTIONS:      # (`x // 64`: compiler/monotone.py)
        return monotone.bounds(kind, [_interval(x, box, sizes) for x in e[1:]], monotone.NUMPY)
    a, b = _interval(e[1], box, sizes), _interval(e[2], box, sizes)
    if kind == "add":
        return a[0] + b[0], a[1] + b[1]
    if kind == "sub":
        return a[0] - b[1], a[1] - b[0]
    with np.errstate(invalid="ignore"):
        ends = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])    # mul by a constant
    return np.minimum.reduce(ends), np.maximum.reduce(ends)


def _holds(e, box: dict, sizes: dict):
    """Whether condition e can hold somewhere in the box (per box of the grid)."""
    kind = e[0]
    if kind in ("and", "or"):
        a, b = _holds(e[1], box, sizes), _holds(e[2], box, sizes)
        return (a & b) if kind == "and" else (a | b)
    if kind == "data":                 # a boolean input as the condition: true somewhere
        return box[e][1] > 0
    if kind not in _CMP:
        return True
    a, b = _interval(e[1], box, sizes), _interval(e[2], box, sizes)
    return {"lt": lambda: a[0] < b[1], "le": lambda: a[0] <= b[1], "gt": lambda: a[1] > b[0],
            "ge": lambda: a[1] >= b[0], "eq": lambda: (a[0] <= b[1]) & (b[0] <= a[1])}[kind]()


def _fails(e, box: dict, sizes: dict):
    """Whether condition e can fail somewhere in the box (per box of the grid); a part read
    from data by the intervals of its values (unknown ones: anywhere)."""
    kind = e[0]
    if kind in ("and", "or"):
        a, b = _fails(e[1], box, sizes), _fails(e[2], box, sizes)
        return (a | b) if kind == "and" else (a & b)
    if kind == "data":                 # a boolean input as the condition: false somewhere
        return box[e][0] <= 0
    if kind not in _CMP:
        return True
    a, b = _interval(e[1], box, sizes), _interval(e[2], box, sizes)
    return {"lt": lambda: a[1] >= b[0], "le": lambda: a[1] > b[0], "gt": lambda: a[0] <= b[1],
            "ge": lambda: a[0] < b[1],
            "eq": lambda: ~((a[0] == a[1]) & (b[0] == b[1]) & (a[0] == b[0]))}[kind]()
