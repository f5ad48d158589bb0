"""What a block of a tiled kernel runs beside what the kernel needs: the tiles it copies at a
time, whole tiles and whole chunks (a tensor-core tiling's fragments padded past the arrays
compute all the same). Read by the issue count (issue.py), its waits (waits.py) and the cost
(cost.py)."""

from __future__ import annotations

from .choices import NUMBERS, prod


def tiles(model, choice, level1: dict) -> list:
    """(load, bytes of the tile a block copies of it at a time: one chunk of a streamed one,
    its block tile otherwise) for every load of the kernel."""
    chunk = dict([choice.stream]) if choice.stream else {}
    return [(a, prod(chunk.get(x, level1[x]) for x in a.axes) * a.bytes)
            for a in model.arrays if a.role == "load"]


def padding(choice, sizes: dict, stream: bool = True):
    """Work a tensor-core tiling does over the work it needs: whole tiles along the warps'
    axes and (`stream`) whole chunks."""
    out = 1.0
    for a, tile in list(choice.group) + ([choice.stream] if choice.stream and stream else []):
        if a in dict(choice.warps) or (choice.stream and a == choice.stream[0]):
            out = out * (NUMBERS.ceil(sizes[a] / tile) * tile / sizes[a])
    return out


def blocks_padding(choice, sizes: dict):
    """Blocks a CUDA-core tiling launches over the fractional units the cost counts: whole
    block tiles along each axis it tiles. Every launched block runs its set-up, copies, row
    loops and merges (issue_simt's per-block terms; benchmarks/model_check.launched): swiglu's
    first kernel at t = 130, f = 77 in 16 x 4 blocks launches 9 x 20 = 180 where the units
    are 156.4. (Its points past the arrays stay uncounted: a value-by-value store skips them
    by its test, embedding's at m = 769; a reduction over clamped rows runs them, which a
    static count holds too: left.)"""
    out = 1.0
    for a, tile in choice.group:
        out = out * (NUMBERS.ceil(sizes[a] / tile) * tile / sizes[a])
    return out


def chunk_count(model, choice, sizes: dict):
    """Chunks of the streamed axis a block runs, over every pass (1 with no stream)."""
    if not choice.stream:
        return 1
    return NUMBERS.ceil(sizes[choice.stream[0]] / choice.stream[1]) * model.streaming.passes
