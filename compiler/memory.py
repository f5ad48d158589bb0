"""Shared memory as allocated, and where the bytes entering it come from.

- `allocated`: a shared-memory buffer as the lowering allocates it: 16-byte aligned; a
  tensor-core tile also pads its rows where they are not swizzled (bank spread:
  compiler/tilelayout.py) and holds two stages of a streamed input (the next chunk is
  copied meanwhile);
- `sectors`: loads along a row shorter than a 32-byte sector waste the rest of it;
- `l2_split`: of the traffic into shared memory, the unique bytes come from HBM and the
  re-loads from L2 when what a wave of resident blocks holds of the loads fits (the cost
  model's L2 level, docs/cost-model.md); a gather's unique bytes: compiler/gather_reads.py;
- `in_place`: loads read from global memory where used, holding no shared memory.
"""

from __future__ import annotations

import numpy as np

from .choices import NUMBERS, Choice, Choices, number, prod, total
from .target import Target
from .tilelayout import row_pad

ALIGN_PAD = 16   # bytes of alignment padding a shared-memory buffer may need
PIPELINE = 2     # stages of a tensor-core kernel's streamed tiles (the Schedule's `stages`)
L2_SHARE = 0.5   # of L2 a wave's re-used tiles may fill and still hit (the rest streams)


def buffer_bytes(values_bytes, arr, res: dict, choice: Choice, stages: int = PIPELINE,
                 sizes=None) -> int:
    """One shared-memory buffer as M counts it (alignment, rows padded where not swizzled,
    stages, peeled rows)."""
    return int(allocated(values_bytes, arr, res, Choices.of(choice), NUMBERS, stages, sizes))


def allocated(values_bytes, arr, res: dict, choice: Choices, ops, stages=PIPELINE, sizes=None):
    """A shared-memory buffer as allocated: 16-byte aligned; a tensor-core tile also pads its
    rows where they are not swizzled and holds `stages` of a streamed input (the next chunks
    are copied meanwhile); a CUDA-core input's rows copied peeled (copies.peeled, at the
    `sizes` given) are a vector longer, rounded up (copies.peel_pitch)."""
    if not choice.warps:
        return values_bytes + ALIGN_PAD + (_peel_pad(arr, res, sizes) if sizes else 0)
    return (values_bytes + _row_pad(arr, res, ops)) * (stages if arr.streamed else 1) + ALIGN_PAD


def stage_bytes(values_bytes, arr, res: dict, choice: Choices, ops):
    """What one more stage of a buffer adds: a tensor-core kernel's streamed input tile (its
    rows padded where not swizzled); 0 for any other buffer."""
    if not choice.warps or not arr.streamed or arr.role != "load":
        return 0
    return values_bytes + _row_pad(arr, res, ops)


def _peel_pad(arr, res: dict, sizes: dict):
    """Bytes a CUDA-core input's peeled rows add (0 where they are not peeled; the lowering
    may still copy a short tile flat, unpeeled: then M counts a little more than it holds)."""
    from . import copies     # (copies reads the model, which this module's readers build)
    if arr.role != "load" or not arr.axes or not arr.bytes:
        return 0
    last = arr.axes[-1]
    length = np.asarray(res[last], dtype=float)
    peel = copies.peeled(sizes[last], length, arr.bytes)
    if not np.any(peel):
        return 0
    rows = prod(res[a] for a in arr.axes[:-1])
    pad = (copies.peel_pitch(length, 16 // arr.bytes) - length) * arr.bytes * rows
    out = np.where(peel, pad, 0)
    return float(out) if np.ndim(out) == 0 else out


def _row_pad(arr, res: dict, ops):
    """Bytes a tensor-core tile adds: `tilelayout.row_pad` values (ROW_PAD, or 0 where its
    rows are swizzled) after each row of its contiguous axis (its last axis held more than
    once, the row's length: rows are the product of the tiled axes before it)."""
    if arr.role != "load":
        return 0
    rows, later, inner = 1, False, 1
    for a in reversed(arr.axes):
        tiled = res[a] > 1
        rows = ops.where(tiled & later, res[a], 1) * rows
        inner = ops.where(later, inner, res[a])
        later = later | tiled
    return ops.where(later, row_pad(inner) * arr.bytes * rows, 0)


def staged_buffers(model, choice: Choices, level1: dict, ops, stages=PIPELINE) -> list:
    """(node, what a block holds of each of its axes, bytes as allocated, operand?) of each
    shared-memory buffer a product's staged work holds (Model.staged; codegen/tiles.
    _copy_computed, codegen/rowstats.py): a computed operand's padded 16-bit tile in every
    stage, a statistic's row buffer (4 bytes a row). `level1`: the block's extents."""
    from .model import Array
    chunk = dict([choice.stream]) if choice.stream else {}
    out = []
    for n, axes, _, _, operand in model.staged:
        held = {a: chunk.get(a, level1[a]) for a in axes}
        if operand:
            tile = Array(n, "", "load", tuple(axes), 2, streamed=True)
            size = allocated(prod(held.values()) * 2, tile, held, choice, ops, stages)
        else:
            held = {a: e for a, e in held.items() if a not in chunk}
            size = prod(held.values()) * 4 + ALIGN_PAD
        out.append((n, held, size, operand))
    return out


def staged_bytes(model, choice: Choices, level1: dict, held: dict, ops, stages=PIPELINE):
    """Shared memory a product's staged work holds beside its loads' tiles (staged_buffers),
    less the tiles of the loads only it reads (Model.direct: read from global memory, never
    allocated)."""
    return total(size for _, _, size, _ in staged_buffers(model, choice, level1, ops, stages)) \
        - sum(size for i, size in held.items() if model.arrays[i].node in model.direct)


def sectors(arr, cov, target: Target):
    """Loads along a row shorter than a 32-byte sector waste the rest of the sector."""
    if not arr.axes or target.coalescing_bytes <= 1 or arr.bytes <= 0:   # (covered: > 0)
        return 1.0
    row = cov[arr.axes[-1]] * arr.bytes
    return NUMBERS.ceil(row / 32) * 32 / row


def l2_split(lc, unique, placed, model, blocks, slots, target: Target, ops):
    """(HBM seconds, L2 seconds) of the traffic into shared memory: unique bytes come from
    HBM; the re-loads hit L2 when what a wave of resident blocks holds of the loads at once
    (distinct slices only) fits half of it (the other half serves the streaming traffic),
    else they come from HBM too."""
    held, across = placed
    concurrent = np.minimum(blocks, slots)
    wave = 0
    for i, size in held.items():
        arr = model.arrays[i]
        distinct = prod(across[a] for a in arr.axes)
        wave = wave + np.minimum(concurrent, distinct) * size
    fits_l2 = wave <= L2_SHARE * target.l2_bytes
    reloads = np.maximum(lc.H - unique, 0)
    hbm_bw = target.levels[1].bandwidth
    hbm = ops.where(fits_l2, np.minimum(unique, lc.H), lc.H) / hbm_bw
    l2 = ops.where(fits_l2, reloads, 0) / target.l2_bandwidth
    return number(hbm), number(l2)


def in_place(arr, model, choice) -> bool:
    """Whether load `arr` is read from global memory where it is used, holding no shared
    memory: an unstaged load on CUDA cores (schedule._staged), a page table's positions,
    and in FlashAttention on tensor cores a gathered table that is no K or V tile (T5's
    bias, read per score by the scalar emitter: compiler/flash.py)."""
    from .model import flash_state
    return (arr.unstaged and not choice.warps or arr.node in model.positions
            or bool(arr.table) and bool(choice.warps) and flash_state(model)
            and arr.node not in model.gathered)
