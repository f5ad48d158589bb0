"""What one warp's load instruction touches: the L1 wavefronts of the CUDA cores' direct reads.

A CUDA-core kernel reads an unstaged load (a split's window of rows, a gather, a view: read
from global memory at each point, never copied into shared memory) with one value per lane
per warp instruction. Where the lanes lie along the array's contiguous (last) axis, a
request touches ceil(32 b / 128) lines of 128 bytes; where each lane reads another row it
touches up to 32 lines, 2 bytes of each for a 16-bit array; lanes along an axis the array
lacks read one address (a broadcast: one line for all of them). The L1 serves a request one
wavefront per line it touches (the sectors of one line in one wavefront), whatever the HBM
then moves: a warp over 32 rows takes 32 wavefronts where the same values along a row take
one. A staged load is copied by the copy loops (compiler/copies.py: contiguous lanes along
the row), coalesced by construction, and not counted here.

The lanes' layout is codegen/kernel.py's: the split's `ways` lanes first (Schedule.split,
`tid % ways`), then the woven axes, the first store's last axis fastest (kernel._order), each
taking the threads along it (`thread` points apart) until the warp's 32 lanes are placed
(`request_lines`). The time is the wavefronts over the
SMs' rate (target `[issue] l1_wavefronts`, per SM per clock: CALIBRATE on a GPU), a compute
bound beside the issue slots (compiler/cost.py; docs/cost-model.md).
"""

from __future__ import annotations

import numpy as np

LINE = 128      # bytes of one L1 line: what one wavefront serves of a request
WARP = 32


def request_lines(arr, model, choice, level1: dict):
    """L1 lines one warp request of `arr` touches, per candidate: the lanes walk the split's
    ways first (`tid % ways`), then the woven axes, the fastest last (codegen/kernel.py:
    `_order`, `build`), `thread` points apart. Lanes along an axis `arr` lacks read the same
    address (a broadcast: no line more); along its contiguous (last) axis they share lines;
    along another of its axes each reads another row."""
    last = arr.axes[-1]
    left = np.asarray(float(WARP))
    rows, along, apart = np.asarray(1.0), np.asarray(1.0), np.asarray(1.0)

    def walk(axis, lanes):
        nonlocal rows, along, left
        lanes = np.minimum(np.maximum(lanes, 1.0), left)
        if axis == last:
            along = lanes
        elif axis in arr.axes:
            rows = rows * lanes
        left = np.maximum(left / lanes, 1.0)

    for a, w in choice.split:
        walk(a, np.asarray(w, dtype=float))
    stores = [a.axes for a in model.arrays if a.role == "store"]
    layout = stores[0] if stores else ()
    woven = sorted(model.woven, key=lambda a: (layout.index(a) if a in layout else -1, a))
    per_thread = dict(choice.thread)
    for a in reversed(woven):
        per = np.asarray(per_thread.get(a, 1), dtype=float)
        walk(a, np.asarray(level1[a], dtype=float) / per)
        if a == last:
            apart = per
    return rows * np.minimum(along, np.ceil(along * apart * arr.bytes / LINE))


def wavefronts_per_value(arr, model, choice, level1: dict):
    """L1 wavefronts a value read by one lane costs (a request's over its 32 values)."""
    return request_lines(arr, model, choice, level1) / WARP


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
