"""The cost model evaluated on a whole grid of choices at once (NumPy), for the tile search.

`cost.evaluate` is the definition; this computes the same numbers for every
point of a Cartesian grid of tile sizes in one vectorised pass, so the search
can be exhaustive and still take milliseconds. A test checks that both agree
on random points.
"""

from __future__ import annotations

import numpy as np

from .columns import Column
from .cost import ALIGN_PAD, LAUNCH_SECONDS, OVERLAP, register_capacity
from .model import Model
from .target import Target


def evaluate_grid(model: Model, cols: tuple[Column, ...], target: Target, sizes: dict,
                  group: dict, chunk, thread: dict, split_axis, ways, inner) -> dict:
    """Arrays (one entry per grid point) of time, M per level and thread count (SIMT plans:
    tensor-core tilings are searched by tensorcore.py and flash.py).

    group/thread: axis -> array of tiles (broadcastable); chunk, ways: arrays (or None);
    split_axis: array of indices into model.reduced (-1: no split) or None.
    """
    levels = target.levels
    axes = model.axes
    reduced = set(model.reduced)
    stream_axis = model.streaming.axis
    S = {a: float(sizes[a]) for a in axes}
    cov1 = {a: (group[a] if a in group else S[a]) for a in axes}
    covs = [cov1]
    if len(levels) > 2:
        cov2 = {}
        for a in axes:
            c = thread[a] if a in thread else cov1[a]
            if split_axis is not None and a in reduced:
                idx = model.reduced.index(a)
                c = np.where(split_axis == idx, cov1[a] / ways, c)
            cov2[a] = c
        covs.append(cov2)
    inner_axis, inner_size = inner if inner else (None, 1)
    out = {"M": [], "H": [], "time": []}
    units = []
    for li, lv in enumerate(levels[1:], start=1):
        cov = covs[li - 1]
        units.append(_prod(S[a] / cov[a] for a in axes))
        res_of = []
        for arr in model.arrays:
            res = {}
            for a in arr.axes:
                if a == stream_axis:
                    res[a] = chunk if li == 1 else (inner_size if a == inner_axis else 1.0)
                elif li == 2 and a in reduced and (
                        arr.role == "value" or
                        arr.role == "load" and not (arr.invariant and stream_axis is not None)):
                    res[a] = inner_size if a == inner_axis else 1.0
                else:
                    res[a] = cov[a]
            res_of.append(res)
        walked = {}
        for arr, res in zip(model.arrays, res_of):
            if arr.role == "load":
                for a, r in res.items():
                    walked[a] = walked.get(a, False) | (np.asarray(r) != np.asarray(cov[a]))
        H = 0.0
        for arr, res in zip(model.arrays, res_of):
            if arr.role == "load":
                vol = _prod(S[a] for a in arr.axes) * arr.passes
                vol = vol * _prod(S[a] / cov[a] for a in axes if a not in arr.axes)
                partial = False
                for a in arr.axes:
                    partial = partial | (np.asarray(res[a]) != np.asarray(cov[a]))
                reload = 1.0
                for a, w in walked.items():
                    if a in arr.axes:
                        continue
                    step = chunk if (li == 1 and a == stream_axis) else \
                        (inner_size if (li == 2 and a == inner_axis) else 1.0)
                    reload = reload * np.where(w, cov[a] / step, 1.0)
                vol = vol * np.where(partial, reload, 1.0)
                if li == 1 and target.coalescing_bytes > 1 and arr.axes:
                    row = cov[arr.axes[-1]] * arr.bytes
                    vol = vol * np.ceil(row / 32) * 32 / row
                H = H + vol * arr.bytes
            elif arr.role == "store":
                H = H + _prod(S[a] for a in arr.axes) * arr.bytes
        last = li == len(levels) - 1
        sizes_at = [_prod(res[a] for a in arr.axes) * arr.bytes * arr.slots
                    if (last or arr.role == "load") else 0.0
                    for arr, res in zip(model.arrays, res_of)]
        if target.processors and li < len(levels) - 1:
            sizes_at = [s + ALIGN_PAD if (not np.isscalar(s) or s) else s for s in sizes_at]
        M = 0.0
        for col in cols:
            M = np.maximum(M, sum((sizes_at[i] for i in col.resident), 0.0))
        out["M"].append(M)
        out["H"].append(H)
        out["time"].append(H / lv.bandwidth if lv.bandwidth else 0.0)
    compute = 0.0
    grouped = set(group)
    for w in model.work:
        points = _prod(S[a] for a in w.axes)
        redo = _prod(S[a] / cov1[a] for a in grouped if a not in w.axes)
        rate = _rate(target, (w.engine, w.dtype))
        compute = compute + w.flops_per_point * points * redo * w.times / rate
    threads = units[1] / units[0] if len(units) > 1 else 1.0
    util = _utilization(target, units[0], out["M"][0], threads)
    worst, total = compute, compute
    for t in out["time"]:
        worst = np.maximum(worst, t)
        total = total + t
    overhead = LAUNCH_SECONDS if target.processors else 0.0
    out["time_total"] = (worst + OVERLAP * (total - worst)) / util + overhead
    out["threads"] = threads
    caps = [lv.capacity_bytes for lv in levels[1:]]
    if len(levels) > 2 and levels[-1].unit == "thread":
        caps[-1] = register_capacity(target, caps[-1], threads)
    out["capacity"] = caps
    return out


def _prod(values):
    out = 1.0
    for v in values:
        out = out * v
    return out


def _rate(target: Target, key) -> float:
    from .cost import _rate as rate
    return rate(target, key, False)


def _utilization(target: Target, blocks, smem, threads):
    if not target.processors:
        return 1.0
    blocks = np.asarray(blocks, dtype=float)
    cap = target.levels[1].capacity_bytes
    per_sm = np.clip(np.minimum(np.floor(cap / np.maximum(smem, 1)),
                                np.floor(2048 / np.maximum(threads, 1))), 1, 32)
    procs = target.processors
    slots = procs * per_sm
    waves = np.ceil(blocks / slots)
    busy_many = np.where(blocks > slots, blocks / (waves * slots), 1.0)
    resident_many = np.minimum(per_sm, np.ceil(blocks / procs))
    busy = np.where(blocks <= procs, blocks / procs, busy_many)
    resident = np.where(blocks <= procs, 1.0, resident_many)
    occupancy = np.minimum(1.0, resident * threads / 256)
    return np.maximum(busy * occupancy, 1e-6)
