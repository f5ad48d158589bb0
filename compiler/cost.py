"""The cost model: M (largest resident footprint) and H (values moved) per memory level.

Each axis of a kernel has, at each level below the top, a *covered* extent
(what one unit of that level handles over its lifetime); each array a
*resident* extent per axis (what one unit holds at once):

    group a by g   (level 1: blocks; level 2: threads)  covered = resident = g
    stream a by s  (a loop with an accumulator)          covered = parent, resident = s
    whole                                                covered = resident = parent

With N_l = prod(size / covered) units at level l, an array X loaded into level
l costs passes * prod_{a in X} size(a) * prod_{a not in X} size(a) / covered_l(a)
values: each unit loads its slice, and units that differ only along axes X
lacks load the same slice again (the paper's "loaded by every group").
At the thread level, values and the loads the streaming loop feeds are walked
along their reduced axes one step at a time (computed where they are used),
and a load that is not resident is loaded again for every step of a walk
along an axis it lacks; loop-invariant loads (attention's queries) and
accumulators stay resident. Outputs are
written once. M_l is the largest sum of resident arrays over the plan's
columns; values and accumulators live at the lowest level (a thread's
registers on a GPU), input tiles at every level they pass through. The same code runs on numbers (tile search) and on sympy
symbols (the formulas `explain` prints), so the two cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import sympy

from .columns import Column
from .model import Model
from .target import Target


# Predicted time: the slowest of compute and each level's transfers (they overlap), plus a
# little of the others (overlap is never perfect), over the fraction of the GPU kept busy,
# plus a launch.
OVERLAP = 0.05
LAUNCH_SECONDS = 2e-6
# Generated code needs registers beyond the values the model counts (indices, addresses,
# temporaries): measured by ptxas on the library kernels at 1.3x to 1.9x. A plan keeps its
# count below the per-thread register file divided by this.
REGISTER_HEADROOM = 2.0
ALIGN_PAD = 16   # bytes of alignment padding a shared-memory buffer may need
WARP = 32
ROW_PAD = 8      # values after each row of a tensor-core tile in shared memory (bank spread)


def register_capacity(target: Target, capacity: float, threads):
    """Bytes of registers a thread may plan for when a block has `threads` threads."""
    if not target.registers_per_processor:
        return capacity / REGISTER_HEADROOM
    per_thread = target.registers_per_processor * 4 / np.maximum(threads, 1)
    return np.minimum(capacity, per_thread) / REGISTER_HEADROOM


@dataclass(frozen=True)
class Choice:
    """The decisions of one kernel's plan (the search space)."""

    group: tuple[tuple[str, int], ...] = ()      # level 1: woven axis -> tile (absent: whole)
    stream: tuple[str, int] | None = None        # level 1: streamed axis and chunk
    thread: tuple[tuple[str, int], ...] = ()     # level 2: woven axis -> tile per thread (warp)
    split: tuple[str, int] | None = None         # level 2: reduced axis split over threads
    inner: tuple[str, int] | None = None         # level 2: reduced axis streamed by each thread
    warps: tuple[tuple[str, int], ...] = ()      # tensor cores: warps per block along row, col


@dataclass(frozen=True)
class LevelCost:
    name: str
    capacity: float
    M: object          # bytes per unit (number or sympy expression)
    H: object          # bytes crossing in and out, all units
    units: object      # how many units of this level run the kernel
    time: object       # H / bandwidth (seconds), 0 for the top level


@dataclass(frozen=True)
class Cost:
    levels: tuple[LevelCost, ...]
    flops: dict = field(default_factory=dict)     # engine -> FLOPs
    compute_time: object = 0
    time: object = 0                              # predicted seconds
    bound: str = ""
    utilization: float = 1.0
    threads: object = 1

    def level(self, name: str) -> LevelCost:
        return next(lv for lv in self.levels if lv.name == name)


def covered(model: Model, choice: Choice, sizes: dict, nlevels: int) -> list[dict]:
    """Per level below the top: axis -> extent one unit covers over its lifetime."""
    group, threads = dict(choice.group), dict(choice.thread)
    level1 = {a: group.get(a, sizes[a]) for a in model.axes}
    out = [level1]
    if nlevels > 2:
        level2 = dict(level1)
        for a, t in threads.items():
            level2[a] = t
        if choice.split:
            a, w = choice.split
            level2[a] = level1[a] / w
        out.append(level2)
    return out


def resident(arr, level: int, cov: dict, choice: Choice, reduced) -> dict:
    """Axis -> extent of `arr` held at once by one unit of `level` (1: block, 2: thread)."""
    stream_axis, chunk = choice.stream if choice.stream else (None, None)
    inner_axis, inner = choice.inner if choice.inner else (None, 1)
    out = {}
    for a in arr.axes:
        if a == stream_axis:
            out[a] = chunk if level == 1 else (inner if a == inner_axis else 1)
        elif level == 2 and a in reduced and (
                arr.role == "value" or
                arr.role == "load" and not (arr.invariant and stream_axis is not None)):
            out[a] = inner if a == inner_axis else 1
        else:
            out[a] = cov[a]
    return out


def walked(model: Model, cov: dict, res_of: list[dict]) -> set:
    """Axes a unit walks in a loop: some load holds less of them than it covers."""
    out = set()
    for arr, res in zip(model.arrays, res_of):
        if arr.role == "load":
            out.update(a for a, r in res.items() if r != cov[a])
    return out


def evaluate(model: Model, cols: tuple[Column, ...], choice: Choice, sizes: dict,
             target: Target, symbolic: bool = False, values: bool = False) -> Cost:
    """Costs of one kernel plan; `values=True` counts values instead of bytes."""
    levels = target.levels
    covs = covered(model, choice, sizes, len(levels))
    reduced = set(model.reduced)
    mx = sympy.Max if symbolic else max
    results = [LevelCost(levels[0].name, levels[0].capacity_bytes, 0, 0, 1, 0)]
    unit_counts = []
    for li, lv in enumerate(levels[1:], start=1):
        cov = covs[li - 1]
        units = _prod(sizes[a] / cov[a] for a in model.axes)
        unit_counts.append(units)
        res_of = [resident(arr, li, cov, choice, reduced) for arr in model.arrays]
        loops = walked(model, cov, res_of)
        H = 0
        for arr, res in zip(model.arrays, res_of):
            width = 1 if values else arr.bytes
            if arr.role == "load":
                vol = _prod(sizes[a] for a in arr.axes) * arr.passes
                vol = vol * _prod(sizes[a] / cov[a] for a in model.axes if a not in arr.axes)
                if any(res[a] != cov[a] for a in arr.axes):   # streamed in: again per step
                    vol = vol * _prod(cov[a] / _step(a, choice, li) for a in loops
                                      if a not in arr.axes)
                coalesce = 1 if symbolic or values or li > 1 else _sectors(arr, cov, target)
                H += vol * width * coalesce
            elif arr.role == "store":
                H += _prod(sizes[a] for a in arr.axes) * width
        last = li == len(levels) - 1
        sizes_at = [_prod(res[a] for a in arr.axes) * (1 if values else arr.bytes) * arr.slots
                    if (last or arr.role == "load") else 0
                    for arr, res in zip(model.arrays, res_of)]
        if not symbolic and not values and target.processors and not last:
            sizes_at = [_buffer_bytes(s, arr, res, choice) if s else s
                        for s, arr, res in zip(sizes_at, model.arrays, res_of)]
        M = 0
        for col in cols:
            total = sum((sizes_at[i] for i in col.resident), 0)
            M = mx(M, total) if M != 0 else total
        time = H / lv.bandwidth if lv.bandwidth else 0
        results.append(LevelCost(lv.name, lv.capacity_bytes, M, H, units, time))
    flops = _flops(model, covs[0], choice, sizes)
    compute = 0
    for engine, amount in flops.items():
        compute += amount / _rate(target, engine, bool(choice.warps))
    if choice.warps and not symbolic:   # fragments padded past the arrays compute all the same
        compute *= _padding(choice, sizes)
    # with tensor cores the register level's unit is a warp: its 32 lanes hold the fragments
    lanes = WARP if choice.warps else 1
    threads = lanes * unit_counts[1] / unit_counts[0] if len(unit_counts) > 1 else 1
    if len(results) > 2 and target.levels[-1].unit == "thread" and not symbolic:
        last = results[-1]
        per_unit = lanes * register_capacity(target, last.capacity, threads)
        results[-1] = LevelCost(last.name, float(per_unit), last.M, last.H, last.units, last.time)
    if symbolic:
        terms = [compute] + [lc.time for lc in results[1:]]
        return Cost(tuple(results), flops, compute, sympy.Max(*terms), "", 1.0, threads)
    util = _utilization(target, unit_counts[0], results[1].M, threads)
    named = [("compute", compute)] + [(f"{lc.name} bandwidth", lc.time) for lc in results[1:]]
    bound, worst = max(named, key=lambda kv: kv[1])
    rest = sum(t for _, t in named) - worst
    overhead = LAUNCH_SECONDS if target.processors else 0.0
    return Cost(tuple(results), flops, compute, (worst + OVERLAP * rest) / util + overhead, bound,
                util, threads)


def _padding(choice: Choice, sizes: dict) -> float:
    """Work a tensor-core tiling does over the work it needs: whole tiles and chunks."""
    out = 1.0
    for a, tile in list(choice.group) + ([choice.stream] if choice.stream else []):
        if a in dict(choice.warps) or (choice.stream and a == choice.stream[0]):
            out *= math.ceil(sizes[a] / tile) * tile / sizes[a]
    return out


def _buffer_bytes(values_bytes, arr, res: dict, choice: Choice):
    """A shared-memory buffer as allocated: 16-byte aligned; a tensor-core tile also pads its
    rows and holds two stages of a streamed input (the next chunk is copied meanwhile)."""
    if not choice.warps:
        return values_bytes + ALIGN_PAD
    return (values_bytes + _row_pad(arr, res)) * (2 if arr.streamed else 1) + ALIGN_PAD


def _row_pad(arr, res: dict):
    """Bytes a tensor-core tile adds: ROW_PAD values after each row of its contiguous axis."""
    tiled = [a for a in arr.axes if res[a] > 1]
    if arr.role != "load" or not tiled:
        return 0
    return ROW_PAD * arr.bytes * _prod(res[a] for a in tiled[:-1])


def _step(axis: str, choice: Choice, level: int):
    """How far one loop step moves along a walked axis."""
    if level == 1 and choice.stream and choice.stream[0] == axis:
        return choice.stream[1]
    if level == 2 and choice.inner and choice.inner[0] == axis:
        return choice.inner[1]
    return 1


def _prod(values):
    out = 1
    for v in values:
        out = out * v
    return out


def _sectors(arr, cov, target: Target) -> float:
    """Loads along a row shorter than a 32-byte sector waste the rest of the sector."""
    if not arr.axes or target.coalescing_bytes <= 1:
        return 1.0
    row = cov[arr.axes[-1]] * arr.bytes
    if row <= 0:
        return 1.0
    return math.ceil(row / 32) * 32 / row


def _flops(model: Model, level1: dict, choice: Choice, sizes: dict) -> dict:
    grouped = {a for a, _ in choice.group}
    out: dict = {}
    for w in model.work:
        points = _prod(sizes[a] for a in w.axes)
        redo = _prod(sizes[a] / level1[a] for a in grouped if a not in w.axes)
        key = (w.engine, w.dtype)
        out[key] = out.get(key, 0) + w.flops_per_point * points * redo * w.times
    return out


def _rate(target: Target, key, tensor_cores: bool) -> float:
    engine, dtype = key
    if tensor_cores and engine == "contraction" and target.engine_for("contraction", dtype):
        rate = target.rate(f"tensor_{dtype}")
        if rate:
            return rate
    return target.rate("simt_f32") or 1.0


def _utilization(target: Target, blocks: float, smem: float, threads: float) -> float:
    """Fraction of the machine a launch keeps busy: idle SMs, the last partial wave, and
    too few threads per SM to hide memory latency (fewer than 256)."""
    if not target.processors:
        return 1.0
    cap = target.levels[1].capacity_bytes
    per_sm = max(1, min(int(cap // max(smem, 1)), int(2048 // max(threads, 1)), 32))
    procs = target.processors
    if blocks <= procs:
        busy, resident = blocks / procs, 1
    else:
        slots = procs * per_sm
        waves = math.ceil(blocks / slots)
        busy = blocks / (waves * slots) if blocks > slots else 1.0
        resident = min(per_sm, math.ceil(blocks / procs))
    occupancy = min(1.0, resident * threads / 256)
    return max(busy * occupancy, 1e-6)
