"""Hopper's warpgroup MMA (wgmma) for a plain matrix product: where it applies and what its
schedule is.

A tensor-core product's `Choice.instruction` is `mma.sync` (codegen/mma.py) or `wgmma`
(codegen/wgmma.py), decided once by the planner (kernel_plan's tensor-core search: each
instruction's fastest tiling, wgmma_search.py's for wgmma, the faster of the two by the model)
and checked here when the schedule is built (`check`). wgmma is considered only on a target whose arch is an `a` one (sm_90a: the only
place wgmma runs) with a `wgmma_<dtype>` rate, for a plain product: an epilogue over the
product's points, operands loaded as they are (no operand computed as it is staged, no
reduction beside it, no split windows or gathers, no mask). Everything else stays on
mma.sync.

A wgmma tiling: one or two warpgroups along the rows (a wgmma Choice's `warps` counts
warpgroups, 1 or 2 along `row`, 1 along `col`, and its `thread` is a warpgroup's 64 x N
tile: the unit the cost model charges with reading the operands and issuing; each warp
holds 16 of the rows, as the instruction's accumulator lays them out), the block's
columns one instruction's N (8 to 256, a multiple of 8: each
warp's tile is 16 x N, N / 2 f32 accumulators a thread), chunks of 16, 32 or 64 along the
contracted axis; both operand tiles in a layout a descriptor describes
(wgmma_layout.descriptor: rows of 16, 32 or 64 values, MN-major rows of 8, or MN-major rows
of a multiple of 64 in blocks of 64, which staged_tiles.operand_layouts gives a wgmma schedule).
"""

from __future__ import annotations

import numpy as np

from . import ir, packing
from .choices import prod
from .wgmma_layout import descriptor

INSTRUCTIONS = ("mma.sync", "wgmma")
ROWS = 64                     # a warpgroup's rows (the m of m64nNk16)
WARPGROUP = 128               # its threads
BLOCK = 64                    # values of a row block of an operand tile stored along M or N
GROUPS = (1, 2)               # warpgroups per block
COLS = (8, 16, 32, 64, 96, 128, 192, 256)    # block columns = N the search considers
CHUNKS = (16, 32, 64)
MAX_N = 256


DESCRIPTORS = 2               # integer ops beside each HGMMA: its two descriptors' adds


def rate_key(choice, dtype: str) -> str:
    """The target's [compute] rate a tensor-core choice runs its products at."""
    return f"{'wgmma' if choice.instruction == 'wgmma' else 'tensor'}_{dtype}"


def warp_instructions(hmma, choice):
    """Warp instructions of a wgmma kernel's products, from their HMMA-equivalents `hmma`:
    each warp issues one HGMMA per 16 of k (its warpgroup's 64 x N tile, N / 8 HMMAs'
    worth) and its two descriptors; the operands never pass through registers (no LDSM)."""
    per = prod(v for _, v in choice.thread) / 4 / (16 * 8)
    return hmma / per * (1 + DESCRIPTORS)


def available(target, dtype: str) -> bool:
    """Whether the target runs wgmma for this dtype: an `a` arch with a wgmma rate."""
    return target.arch.endswith("a") and bool(target.rate(f"wgmma_{dtype}"))


def why_not(g, kernel, model, site, target) -> str | None:
    """Why a product site (tensorcore.Site: the callers keep attention and chains, which
    wgmma does not run yet, on mma.sync) stays on mma.sync (None: wgmma may run it)."""
    if not available(target, site.dtype):
        return f"{target.name} ({target.arch}) has no wgmma for {site.dtype}"
    if site.pairs:
        return "a sum of products runs on mma.sync (codegen/mma.py: a chunk loop per pair)"
    if site.duals:
        return "products with accumulators of their own run on mma.sync (duals.py)"
    if site.computed or site.stats or site.renamed or getattr(site, "columns", ()):
        return "an operand is computed as it is staged, or a reduction runs beside the product"
    if model.mask is not None:
        return "the product is masked"
    if site.a not in kernel.loads or site.b not in kernel.loads:
        return "an operand is a split's window or a gather, not a load"
    return None


def _inner(g, n: int, frag: str, k: str) -> str:
    """The axis a staged operand tile holds contiguously (staged_tiles.operand_layouts' rule)."""
    axes = ir.type_of(g, n).axes
    return frag if packing.position(axes, frag) > axes.index(k) else k


def descriptors(g, site, layouts: dict):
    """(A's, B's) descriptor of a schedule's operand tiles (`layouts`: node -> TileLayout),
    each None where no canonical layout matches."""
    return tuple(descriptor(layouts[n], layouts[n].axes[1] == site.red) for n in (site.a, site.b))


def check(g, site, tile: dict, thread: dict, warps: dict, chunk: int, layouts: dict) -> str | None:
    """Why a wgmma schedule is not one the lowering can emit (None: it is). A wgmma choice
    counts warpgroups in `warps` and gives a warpgroup's tile in `thread` (the unit the cost
    model charges: it reads the operands and issues the instructions)."""
    groups = warps.get(site.row, 0)
    if groups not in GROUPS or warps.get(site.col) != 1:
        return "wgmma takes one or two warpgroups along the rows and one along the columns"
    n = tile[site.col]
    if thread.get(site.row) != ROWS or thread.get(site.col) != n or n % 8 or n > MAX_N:
        return f"a warpgroup takes 64 rows and all the block's columns, a multiple of 8 up to " \
               f"{MAX_N} (columns {n})"
    if chunk not in CHUNKS:
        return f"wgmma's chunk is one of {', '.join(map(str, CHUNKS))} (chunk {chunk})"
    found = descriptors(g, site, layouts)
    if None in found or (groups > 1 and not found[0].rows64):
        return "an operand tile's layout is not one a wgmma descriptor describes (rows of " \
               "16, 32 or 64 values; an operand stored along its rows at most 64 of them)"
    return None


def feasible(g, site, bm, bn, bk) -> np.ndarray:
    """Per candidate (arrays of block rows, columns and chunks): whether both operand tiles
    would have descriptors (the layouts tilelayout gives those extents)."""
    ok = np.ones(np.broadcast(bm, bn, bk).shape, bool)
    for n, frag, extent in ((site.a, site.row, bm), (site.b, site.col, bn)):
        if _inner(g, n, frag, site.red) == site.red:        # K-major: rows of the chunk
            line = np.broadcast_to(bk, ok.shape)
            ok &= np.isin(line, (16, 32, 64))
        else:                                               # MN-major: rows of the tile
            line = np.broadcast_to(extent, ok.shape)
            ok &= np.isin(line, (8, 16, 32, 64)) | (line % BLOCK == 0)
    return ok & np.isin(bk, CHUNKS)


def tilings(g, site, top_rows: int, top_cols: int) -> np.ndarray:
    """The wgmma tilings (bm, bn, bk, warpgroups along the rows, 1) whose tiles are no larger
    than the axes need (`top_*`: the power-of-two tile covering each axis) and whose tiles
    have descriptors."""
    rows = [(ROWS * w, bn, bk, w, 1) for w in GROUPS for bn in COLS for bk in CHUNKS
            if ROWS * w <= max(top_rows, ROWS) and bn <= max(top_cols, 8)]
    found = np.array(rows, dtype=float).reshape(-1, 5)
    keep = feasible(g, site, found[:, 0], found[:, 1], found[:, 2])
    return found[keep]


__all__ = ["INSTRUCTIONS", "available", "why_not", "check", "descriptors", "feasible", "tilings",
           "rate_key", "warp_instructions"]
