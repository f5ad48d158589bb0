"""What the pipes wait for beyond the issue slots (issue.py): the products' dependence within a
warp, the chunk loop's barriers, and each wave's first loads (the pipeline fill). Seconds the
cost model adds to a kernel's compute time (cost.py), assumptions of the order published
measurements imply, to calibrate on a GPU (benchmarks/gpu_check.py)."""

from __future__ import annotations

import numpy as np

from .choices import NUMBERS
from .tiled_work import chunk_count
from .target import Target


# Within a warp of FlashAttention-2 (and of a chain of products) the softmax waits for the
# chunk's scores and the next products wait for the softmax: the tensor pipe and the
# instructions that depend on it overlap only across the warps a scheduler holds. With W
# warps per scheduler, the model adds min(tensor, dependent) / W to the slower of the two
# (W = 1: no overlap at all; many warps: almost full). An assumption of the order that
# FlashAttention-2's published H100 figures imply (282-324 TFLOP/s at d 64 with 2 warps per
# scheduler, against 543 predicted with full overlap): CALIBRATE on a GPU
# (benchmarks/gpu_check.py).
def serial(parts: dict, target: Target, warps_per_block, blocks_per_sm):
    """Seconds added to the compute time for the products' dependence within a warp."""
    if "dependent" not in parts:
        return 0.0
    schedulers = dict(target.per_clock).get("schedulers", 4)
    per_scheduler = np.maximum(warps_per_block * blocks_per_sm / schedulers, 1)
    return np.minimum(parts["tensor"], parts["dependent"]) / per_scheduler


# A tensor-core kernel's chunk loop waits at its barriers: the warps of a block meet there,
# and the tensor pipe idles from the last product before a barrier to the first after it
# (the barrier itself, then the first fragments' ldmatrix from shared memory, a latency of
# some 30 cycles on Ampere and Hopper), unless another resident block issues meanwhile. An
# assumption of the order microbenchmarks report for both latencies (Abdelkhalik et al.,
# "Demystifying the Nvidia Ampere Architecture through Microbenchmarking", 2022; Luo et al.,
# arXiv:2402.13499, 2024), not a measured figure: CALIBRATE on a GPU
# (benchmarks/gpu_check.py). Per barrier of the pipeline (codegen/mma.MmaLowering._pipeline):
BARRIER_CYCLES = 30
BARRIERS_PER_CHUNK = 1
# ... and each block's pipeline fills before its first chunk computes: the loads' first tiles
# arrive after the memory latency (occupancy.LATENCY_SECONDS) at the SM's share of the HBM
# bandwidth. Larger chunks pay fewer barriers and a longer fill: the chunk and k-step are a
# trade-off of the two (issue 13), no longer a tie (`barriers`, `fill`).


def barriers(model, choice, sizes: dict, target: Target, blocks, span=None):
    """Seconds the tensor pipe idles at the chunks' barriers over the whole GPU, as if one
    block ran per SM at a time (the caller divides by the resident blocks, whose work fills
    each other's idle time); 0 for the CUDA cores (their barriers are in issue_simt.ITERATION, and
    their many resident blocks hide them)."""
    if not choice.warps or not choice.stream or not target.processors or not target.clock_hz:
        return 0.0
    visited = chunk_count(model, choice, sizes) * (span[0] if span else 1)
    per_chunk = BARRIERS_PER_CHUNK + (1 if model.across else 0)   # (a chain's values staged
    return blocks * visited * per_chunk * BARRIER_CYCLES / \
        (target.clock_hz * target.processors)                    # for the products over rows)


def fill(loads, target: Target, blocks, per_sm, latency: float):
    """Seconds a kernel waits for its blocks' first tiles, on either engine: the memory
    latency, then the tiles at the SM's share of the HBM bandwidth, once per wave of
    resident blocks (the blocks resident together wait together). Wall-clock time: the
    caller adds it beside the launch, not within what idle SMs stretch. `loads`: tiles()."""
    if not target.processors:
        return 0.0
    first = sum(tile for _, tile in loads)
    bandwidth = target.levels[1].bandwidth if len(target.levels) > 1 else None
    waves = NUMBERS.ceil(blocks / (target.processors * per_sm))
    return waves * (latency + (first / (bandwidth / target.processors) if bandwidth else 0))
