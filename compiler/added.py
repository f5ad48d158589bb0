"""What the model charges a chain's products over its rows (chain.Across): arrays every
block of rows adds its partial sums into with atomics (`Model.across`, FlashAttention-2's dQ
in the kernel over blocks of keys). cost.evaluate and issue.compute read these.

- traffic: 4 bytes an add (an f32 atomic) from every block of rows, once per value unique;
- the adds themselves, at the target's `[l2] atomics` rate (a term of the time of its own);
- the chunk's values staged as 16 bits in shared memory, one tile per product;
- the conversion kernel after the chain: read and clear the scratch, write the array;
- issue slots per block and computed chunk: the values packed and stored to shared memory
  (two 16-bit values a pack and a store), per 16 x 8 tile of the product and 16 of the rows
  an ldmatrix.x4 of them and an x2 of the loaded operand, and per value of the block's share
  an atomic add with its address and test. Fitted to the SASS of the two such kernels of
  attention's plain gradient at b=4, h=16, q=x=4096 (NVRTC, sm_90, static counts,
  2026-12-06; `benchmarks/model_check.kernel_sass`): SASS over the model's issue slots
  0.98 at d = 64 (dQ added) and 1.04 at d = 128 (dK added), from 1.20 and 1.53 with the
  1, 2 and 3 first counted in the C (the fragments' addresses are computed per tile).
  CALIBRATE on a GPU.

A chain's stored sums of its chunk values (chain_sums.py, `Model.sums`) are among them with
no staged tile and no product: per block and computed chunk, each value of the chunk added
(SUM slots a value: one add), and where the sum keeps the chunk's positions, each value's
atomic (ADD); a sum over all the block's chunks adds once per warp after them.
"""

from __future__ import annotations

from .choices import prod

WARP = 32
STAGE = 1.0
LDSM = 4.0
ADD = 9.0
SUM = 1.0


def arrays(model):
    """The stored arrays the blocks add into."""
    return [a for a in model.arrays if a.role == "store" and a.node in model.across]


def traffic(arr, sizes: dict, repeats: dict, axes, values: bool = False) -> tuple:
    """(adds, bytes moved, bytes unique) of added array `arr`: `repeats` the units side by
    side along each of the kernel's `axes` (the blocks of rows among them)."""
    once = prod(sizes[a] for a in arr.axes)
    adds = once * prod(repeats[a] for a in axes if a not in arr.axes)
    width = 1 if values else 4
    return adds, adds * width, once * width


def staged(model, choice, level1: dict):
    """Shared memory of the chunk's values staged for the products over the rows."""
    return len(model.across - model.sums) * 2 * level1[choice.warps[0][0]] * choice.stream[1]


def finish_bytes(model, sizes: dict):
    """What the conversion kernel moves: each added value's scratch read and cleared, the
    array written in its dtype."""
    return sum(prod(sizes[a] for a in arr.axes) * (4 + 4 + arr.bytes) for arr in arrays(model))


def issue(model, choice, sizes: dict, level1: dict, block_chunks):
    """Warp instructions of the products over the rows, all blocks: `block_chunks` the
    (block, chunk) pairs computed."""
    if not model.across:
        return 0.0
    rows, chunk = level1[choice.warps[0][0]], choice.stream[1]
    out = 0.0
    for arr in arrays(model):
        if arr.node in model.sums:      # (chain_sums.py: no product, an add a value)
            each = ADD if choice.stream[0] in arr.axes else SUM
            out = out + rows * chunk * each / WARP
            continue
        width = prod(level1[a] for a in arr.axes if a != choice.stream[0])   # (batch: 1)
        out = out + (rows * chunk * STAGE + chunk * width * ADD) / WARP + \
            chunk / 16 * width / 8 * rows / 16 * LDSM
    return out * block_chunks
