"""What one warp's load instruction touches: the L1 wavefronts of the CUDA cores' direct reads.

A CUDA-core kernel reads an unstaged load (a split's window of rows, a gather, a view: read
from global memory at each point, never copied into shared memory) with one value per lane
per warp instruction. Where the lanes lie along the array's contiguous (last) axis, a
request touches ceil(32 b / 128) lines of 128 bytes; where each lane reads another row it
touches up to 32 lines, 2 bytes of each for a 16-bit array. The L1 serves a request one
wavefront per line it touches (the sectors of one line in one wavefront), whatever the HBM
then moves: a warp over 32 rows takes 32 wavefronts where the same values along a row take
one. A staged load is copied by the copy loops (compiler/copies.py: contiguous lanes along
the row), coalesced by construction, and not counted here.

The lanes along the contiguous axis of a load (codegen/kernel.py's thread layout): the
split's `ways` lanes when they walk that axis (Schedule.split, `tid % ways`), else, when
that axis is the threads' fastest woven one (kernel._order: the first store's last axis),
the threads along it, `thread` points apart; else one. The time is the wavefronts over the
SMs' rate (target `[issue] l1_wavefronts`, per SM per clock: CALIBRATE on a GPU), a compute
bound beside the issue slots (compiler/cost.py; docs/cost-model.md).
"""

from __future__ import annotations

import numpy as np

LINE = 128      # bytes of one L1 line: what one wavefront serves of a request
WARP = 32


def lanes_along(arr, model, choice, level1: dict):
    """(lanes of one warp along `arr`'s contiguous axis, values apart) per candidate."""
    last = arr.axes[-1]
    ways = 1.0
    for a, w in choice.split:
        if a == last:
            return np.asarray(w, dtype=float), 1.0
        ways = np.asarray(w, dtype=float) if np.ndim(w) or w != 1 else ways
    stores = [a.axes for a in model.arrays if a.role == "store"]
    layout = stores[0] if stores else ()
    woven = sorted(model.woven, key=lambda a: (layout.index(a) if a in layout else -1, a))
    if not woven or woven[-1] != last:
        return np.asarray(1.0), 1.0
    per = np.asarray(dict(choice.thread).get(last, 1), dtype=float)
    threads = np.maximum(np.asarray(level1[last], dtype=float) / per, 1.0)
    return np.minimum(threads, WARP / np.maximum(ways, 1.0)), per


def wavefronts_per_value(arr, model, choice, level1: dict):
    """L1 wavefronts a value read by one lane costs (a request's over its 32 values)."""
    lanes, apart = lanes_along(arr, model, choice, level1)
    rows = WARP / lanes
    span = lanes * apart * arr.bytes
    lines = np.minimum(lanes, np.ceil(span / LINE))
    return rows * lines / WARP


def seconds(model, choice, level1: dict, reads, target):
    """Seconds the L1 takes to serve the direct reads (`reads`: (load, bytes the register
    level moves of it), issue_simt.reads's) of the unstaged loads of a CUDA-core kernel;
    0 on tensor cores (their loads are staged) or where the target gives no rate."""
    rate = target.per_second("l1_wavefronts")
    if not rate or choice.warps:
        return 0.0
    out = 0.0
    for arr, moved in reads:
        if not arr.unstaged or not arr.axes or not arr.bytes:
            continue
        out = out + moved / arr.bytes * wavefronts_per_value(arr, model, choice, level1)
    return out / rate
