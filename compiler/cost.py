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
registers on a GPU), input tiles at every level they pass through.

`evaluate` is the one definition, and it runs on three kinds of numbers:

- a `Choice` of numbers: one plan (the planner's result, `explain`, tests);
- a `Choices` (a candidate set: each size a NumPy array, one entry per
  candidate): the tile searches cost all their candidates in one call, and
  every field of the Cost is then an array (the bound is named per candidate
  by `Cost.at`, which reads one candidate's cost off the set);
- a `Choice` of sympy symbols with `symbolic=True`: the formulas `explain`
  prints, so the printed formulas are the ones the planner optimises.

Where the model branches on a size (is a load streamed in, does a unit walk an
axis, how many blocks fit an SM) it selects per candidate (`np.where`); terms
that depend on a few sizes only keep the shape of those (arrays broadcast).
`fastest` picks a search's winner from a candidate set's costs. sympy is
imported on the symbolic path only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

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
PIPELINE = 2     # stages of a tensor-core kernel's streamed tiles (the Schedule's `stages`)
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
class Choices:
    """A candidate set of one kernel: Choice's decisions with, for each size, a NumPy array
    (the arrays broadcast to the set's shape, one entry per candidate: a grid of
    candidates can be an open mesh, so what depends on a few sizes is computed once per
    combination of those) or a number all candidates share.

    `split` lists every reduced axis candidates may split, with its ways per candidate (1:
    that candidate does not split it; a candidate splits at most one axis). Every candidate
    is a tensor-core tiling (`warps` given) or none is."""

    group: tuple[tuple[str, object], ...] = ()
    stream: tuple[str, object] | None = None
    thread: tuple[tuple[str, object], ...] = ()
    split: tuple[tuple[str, object], ...] = ()
    inner: tuple[str, object] | None = None
    warps: tuple[tuple[str, object], ...] = ()

    @classmethod
    def of(cls, choice: Choice | Choices) -> Choices:
        """One choice as a candidate set of one (sizes stay numbers or symbols)."""
        if isinstance(choice, Choices):
            return choice
        return cls(choice.group, choice.stream, choice.thread,
                   (choice.split,) if choice.split else (), choice.inner, choice.warps)

    @functools.cached_property
    def shape(self) -> tuple[int, ...]:
        pairs = self.group + self.thread + self.split + self.warps + \
            tuple(p for p in (self.stream, self.inner) if p)
        return np.broadcast_shapes(*(np.shape(v) for _, v in pairs))

    def __len__(self) -> int:
        return int(np.prod(self.shape))

    def at(self, i: int, shape: tuple[int, ...] | None = None) -> Choice:
        """Candidate `i` (an index into the set flattened to `shape`, its own by default) as
        a Choice: every listed axis kept, whole or not."""
        shape = self.shape if shape is None else shape
        where = np.unravel_index(i, shape)

        def pairs(ps):
            return tuple((a, int(entries(v, where))) for a, v in ps)
        split = next(((a, w) for a, w in pairs(self.split) if w > 1), None)
        stream = pairs((self.stream,))[0] if self.stream else None
        inner = pairs((self.inner,))[0] if self.inner else None
        return Choice(pairs(self.group), stream, pairs(self.thread), split, inner,
                      pairs(self.warps))


@dataclass(frozen=True)
class LevelCost:
    name: str
    capacity: object   # bytes one unit may hold (per candidate for a candidate set)
    M: object          # bytes per unit (number, array, or sympy expression)
    H: object          # bytes crossing in and out, all units
    units: object      # how many units of this level run the kernel
    time: object       # H / bandwidth (seconds), 0 for the top level


@dataclass(frozen=True)
class Cost:
    levels: tuple[LevelCost, ...]
    flops: dict = field(default_factory=dict)     # engine -> FLOPs
    compute_time: object = 0
    time: object = 0                              # predicted seconds
    bound: str | None = ""                        # the term that bounds the time (its name;
                                                  # for a candidate set, None: see at())
    utilization: object = 1.0
    threads: object = 1

    def level(self, name: str) -> LevelCost:
        return next(lv for lv in self.levels if lv.name == name)

    def at(self, i: int, shape: tuple[int, ...]) -> Cost:
        """The cost of candidate `i` of a candidate set flattened to `shape` (numbers)."""
        where = np.unravel_index(i, shape)

        def pick(v):
            return _number(entries(v, where))

        def picked(record, skip):
            return type(record)(**{f: getattr(record, f) if f in skip else
                                   pick(getattr(record, f)) for f in record.__dataclass_fields__})
        levels = tuple(picked(lc, ("name",)) for lc in self.levels)
        compute = pick(self.compute_time)
        bound = self.bound if self.bound is not None else \
            _bound(levels, [compute] + [lc.time for lc in levels[1:]])
        return Cost(levels, {k: pick(v) for k, v in self.flops.items()}, compute,
                    pick(self.time), bound, pick(self.utilization), pick(self.threads))


class _Numbers:
    """Arithmetic on numbers and arrays: a choice the model makes on a size is made per
    candidate (plain numbers stay Python numbers: most terms of a candidate set are)."""

    @staticmethod
    def differ(x, y):
        if x is y:
            return False
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            return np.not_equal(x, y)
        return x != y

    @staticmethod
    def where(cond, yes, no):
        if isinstance(cond, np.ndarray) and cond.ndim:
            return np.where(cond, yes, no)
        return yes if cond else no

    @staticmethod
    def maximum(a, b):
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return np.maximum(a, b)
        return max(a, b)

    @staticmethod
    def ceil(x):
        return np.ceil(x) if isinstance(x, np.ndarray) else math.ceil(x)


class _Symbols:
    """Arithmetic on sympy expressions: sizes compare structurally (a chunk s_x differs from
    its axis x), the largest column is a Max."""

    def __init__(self):
        import sympy
        self.sympy = sympy

    @staticmethod
    def differ(x, y):
        return x != y

    @staticmethod
    def where(cond, yes, no):
        return yes if cond else no

    def maximum(self, a, b):
        return b if a == 0 else self.sympy.Max(a, b)


NUMBERS = _Numbers()


def covered(model: Model, choice: Choice | Choices, sizes: dict, nlevels: int) -> list[dict]:
    """Per level below the top: axis -> extent one unit covers over its lifetime."""
    choice = Choices.of(choice)
    group, threads = dict(choice.group), dict(choice.thread)
    level1 = {a: group.get(a, sizes[a]) for a in model.axes}
    out = [level1]
    if nlevels > 2:
        level2 = dict(level1)
        for a, t in threads.items():
            level2[a] = t
        for a, w in choice.split:
            level2[a] = level1[a] / w
        out.append(level2)
    return out


def resident(arr, level: int, cov: dict, choice: Choice | Choices, reduced) -> dict:
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


def walked(model: Model, short: list) -> dict:
    """Axis -> whether a unit walks it in a loop (per candidate): some load holds less of it
    than it covers (`short`: per array, axis -> whether it holds less; None but for loads).
    In the order of model.axes."""
    out: dict = {}
    for gaps in short:
        for a, gap in (gaps or {}).items():
            out.setdefault(a, []).append(gap)
    return {a: _any(out[a]) for a in model.axes if a in out}


def evaluate(model: Model, cols: tuple[Column, ...], choice: Choice | Choices, sizes: dict,
             target: Target, symbolic: bool = False, values: bool = False) -> Cost:
    """Costs of one kernel plan, or of every candidate of a set (the module docstring);
    `values=True` counts values instead of bytes."""
    ops = _Symbols() if symbolic else NUMBERS
    if isinstance(choice, Choices):   # arrays: in floats (a Python int may pass int64's range)
        sizes = {a: float(v) for a, v in sizes.items()}
    choice = Choices.of(choice)
    levels = target.levels
    covs = covered(model, choice, sizes, len(levels))
    reduced = set(model.reduced)
    results = [LevelCost(levels[0].name, levels[0].capacity_bytes, 0, 0, 1, 0)]
    unit_counts = []
    for li, lv in enumerate(levels[1:], start=1):
        cov = covs[li - 1]
        across = {a: sizes[a] / cov[a] for a in model.axes}   # units side by side along a
        units = _prod(across.values())
        unit_counts.append(units)
        res_of = [resident(arr, li, cov, choice, reduced) for arr in model.arrays]
        short = [{a: ops.differ(res[a], cov[a]) for a in arr.axes} if arr.role == "load"
                 else None for arr, res in zip(model.arrays, res_of)]
        loops = walked(model, short)
        moved = []
        for arr, gaps in zip(model.arrays, short):
            width = 1 if values else arr.bytes
            if arr.role == "load":
                vol = _prod(sizes[a] for a in arr.axes) * arr.passes
                vol = vol * _prod(across[a] for a in model.axes if a not in arr.axes)
                steps = [ops.where(w, cov[a] / _step(a, choice, li), 1)
                         for a, w in loops.items() if a not in arr.axes]
                if steps:       # not resident: loaded again at every step of those walks
                    vol = ops.where(_any(gaps.values()), vol * _prod(steps), vol)
                coalesce = 1 if symbolic or values or li > 1 else _sectors(arr, cov, target)
                moved.append(vol * (width * coalesce))     # (width: a power of two)
            elif arr.role == "store":
                moved.append(_prod(sizes[a] for a in arr.axes) * width)
        H = _sum(moved)
        last = li == len(levels) - 1
        held = {}          # array index -> what one unit holds of it (arrays counted here)
        extents: dict = {}  # the product of resident extents, once per distinct product
        for i, (arr, res) in enumerate(zip(model.arrays, res_of)):
            if last or arr.role == "load":     # (bytes: a power of two)
                factors = [res[a] for a in arr.axes]
                key = tuple(id(f) if isinstance(f, np.ndarray) else f for f in factors)
                if key not in extents:
                    extents[key] = _prod(factors)
                size = extents[key] * ((1 if values else arr.bytes) * arr.slots)
                if not symbolic and not values and target.processors and not last:
                    size = _buffer_bytes(size, arr, res, choice, ops)
                held[i] = size
        M = 0
        for together in _columns(cols, held, symbolic):
            M = ops.maximum(M, _sum(held[i] for i in together))
        time = H / lv.bandwidth if lv.bandwidth else 0
        results.append(LevelCost(lv.name, lv.capacity_bytes, M, H, units, time))
    flops = _flops(model, covs[0], choice, sizes)
    compute = _sum(amount / _rate(target, engine, bool(choice.warps))
                   for engine, amount in flops.items())
    if choice.warps and not symbolic:   # fragments padded past the arrays compute all the same
        compute = compute * _padding(choice, sizes)
    # with tensor cores the register level's unit is a warp: its 32 lanes hold the fragments
    lanes = WARP if choice.warps else 1
    active = lanes * unit_counts[1] / unit_counts[0] if len(unit_counts) > 1 else 1
    # the block as launched (compiler/schedule.py): whole threads per axis, whole warps; the
    # register file and the SM's thread slots are shared by these, latency is hidden by the
    # active ones
    threads = active if symbolic or len(covs) < 2 or choice.warps else \
        _launched(model, covs)
    if len(results) > 2 and target.levels[-1].unit == "thread" and not symbolic:
        last = results[-1]
        per_unit = lanes * register_capacity(target, last.capacity, threads)
        results[-1] = LevelCost(last.name, per_unit, last.M, last.H, last.units, last.time)
    if symbolic:
        terms = [compute] + [lc.time for lc in results[1:]]
        return Cost(tuple(results), flops, compute, ops.sympy.Max(*terms), "", 1.0, threads)
    util = utilization(target, unit_counts[0], results[1].M, threads, active)
    terms = [compute] + [lc.time for lc in results[1:]]
    worst = functools.reduce(ops.maximum, terms)
    rest = _sum(terms) - worst
    overhead = LAUNCH_SECONDS if target.processors else 0.0
    time = (worst + OVERLAP * rest) / util + overhead
    scalar = not any(isinstance(t, np.ndarray) for t in terms)
    return _plain(Cost(tuple(_plain(lc) for lc in results), {k: _number(v) for k, v in flops.items()},
                       compute, time, _bound(results, terms) if scalar else None, util, threads))


def _columns(cols, held: dict, symbolic: bool) -> list[tuple[int, ...]]:
    """The columns whose totals M is the largest of, as the arrays counted at this level:
    each distinct set once, and on numbers only the sets no other set contains (sizes are
    never negative, so a contained set never totals more)."""
    sets = list(dict.fromkeys(tuple(i for i in col.resident if i in held) for col in cols))
    if symbolic:
        return sets
    members = [frozenset(s) for s in sets]
    return [s for s, m in zip(sets, members) if not any(m < other for other in members)]


def _bound(levels, terms) -> str:
    """The name of the term that bounds the time: the first of the largest."""
    names = ["compute"] + [f"{lc.name} bandwidth" for lc in levels[1:]]
    return names[max(range(len(terms)), key=lambda i: terms[i])]


def fastest(cost: Cost, ok, ties, shape: tuple[int, ...]) -> int | None:
    """The fastest candidate where `ok`, as an index into the candidate set flattened to
    `shape`, or None when none is: times equal to 15 decimals are broken by `ties` (terms
    that broadcast to `shape`; the first decides first, the smallest wins, then the
    earliest candidate), so the search is deterministic."""
    time = np.round(np.broadcast_to(np.where(ok, cost.time, np.inf), shape).ravel(), 15)
    tied = np.flatnonzero(time == time.min())
    if time[tied[0]] == np.inf:
        return None
    if len(tied) == 1:
        return int(tied[0])
    where = np.unravel_index(tied, shape)
    keys = [np.broadcast_to(entries(t, where), tied.shape) for t in reversed(ties)]
    return int(tied[np.lexsort(keys)[0]])


def fits(cost: Cost):
    """Whether every level's footprint fits its capacity (per candidate for a candidate set)."""
    ok = True
    for lc in cost.levels[1:]:
        ok = ok & (lc.M <= lc.capacity)
    return ok


def _plain(record):
    """The record with NumPy scalars as Python numbers (arrays stay arrays)."""
    kinds = {f: _number(getattr(record, f)) for f in record.__dataclass_fields__
             if f not in ("levels", "flops", "name")}
    return type(record)(**{**record.__dict__, **kinds})


def entries(v, where: tuple):
    """The entries at `where` (an index into the candidates' shape, of numbers or of arrays
    of them, as np.unravel_index gives) of a term that broadcasts to it; a number is its own
    entry."""
    if not isinstance(v, np.ndarray):
        return v
    where = where[len(where) - v.ndim:]
    return v[tuple(0 if n == 1 else j for n, j in zip(v.shape, where))]


def _number(v):
    scalar = isinstance(v, np.generic) or isinstance(v, np.ndarray) and v.ndim == 0
    return v.item() if scalar else v


def _padding(choice: Choices, sizes: dict):
    """Work a tensor-core tiling does over the work it needs: whole tiles and chunks."""
    out = 1.0
    for a, tile in list(choice.group) + ([choice.stream] if choice.stream else []):
        if a in dict(choice.warps) or (choice.stream and a == choice.stream[0]):
            out = out * (NUMBERS.ceil(sizes[a] / tile) * tile / sizes[a])
    return out


def _buffer_bytes(values_bytes, arr, res: dict, choice: Choices, ops):
    """A shared-memory buffer as allocated: 16-byte aligned; a tensor-core tile also pads its
    rows and holds two stages of a streamed input (the next chunk is copied meanwhile)."""
    if not choice.warps:
        return values_bytes + ALIGN_PAD
    return (values_bytes + _row_pad(arr, res, ops)) * (PIPELINE if arr.streamed else 1) + ALIGN_PAD


def _row_pad(arr, res: dict, ops):
    """Bytes a tensor-core tile adds: ROW_PAD values after each row of its contiguous axis
    (its last axis held more than once: rows are the product of the tiled axes before it)."""
    if arr.role != "load":
        return 0
    rows, later = 1, False
    for a in reversed(arr.axes):
        tiled = res[a] > 1
        rows = ops.where(tiled & later, res[a], 1) * rows
        later = later | tiled
    return ops.where(later, ROW_PAD * arr.bytes * rows, 0)


def _step(axis: str, choice: Choices, level: int):
    """How far one loop step moves along a walked axis."""
    if level == 1 and choice.stream and choice.stream[0] == axis:
        return choice.stream[1]
    if level == 2 and choice.inner and choice.inner[0] == axis:
        return choice.inner[1]
    return 1


def _prod(values):
    """The product, left to right (1 when empty)."""
    values = iter(values)
    out = next(values, 1)
    for v in values:
        out = out * v
    return out


def _sum(values):
    """The sum, left to right (0 when empty)."""
    values = iter(values)
    out = next(values, 0)
    for v in values:
        out = out + v
    return out


def _any(values):
    """Whether any is true (per candidate; False when empty)."""
    out = False
    for v in values:
        if isinstance(v, np.ndarray):
            out = v if out is False else out | v
        elif v:
            return True
    return out


def _sectors(arr, cov, target: Target):
    """Loads along a row shorter than a 32-byte sector waste the rest of the sector."""
    if not arr.axes or target.coalescing_bytes <= 1 or arr.bytes <= 0:   # (covered: > 0)
        return 1.0
    row = cov[arr.axes[-1]] * arr.bytes
    return NUMBERS.ceil(row / 32) * 32 / row


def _flops(model: Model, level1: dict, choice: Choices, sizes: dict) -> dict:
    grouped = {a for a, _ in choice.group}
    out: dict = {}
    for w in model.work:
        points = _prod(sizes[a] for a in w.axes)
        redo = _prod(sizes[a] / level1[a] for a in model.axes
                     if a in grouped and a not in w.axes)
        key = (w.engine, w.dtype)
        amount = w.flops_per_point * points * redo
        amount = amount * w.times if w.times != 1 else amount
        out[key] = out[key] + amount if key in out else amount
    return out


def _rate(target: Target, key, tensor_cores: bool) -> float:
    engine, dtype = key
    if tensor_cores and engine == "contraction" and target.engine_for("contraction", dtype):
        rate = target.rate(f"tensor_{dtype}")
        if rate:
            return rate
    return target.rate("simt_f32") or 1.0


def _launched(model: Model, covs: list[dict]):
    """Threads per block as launched: each axis's thread count rounded up to whole threads,
    the block to whole warps (at least one)."""
    count = _prod(np.ceil(np.asarray(covs[0][a] / covs[1][a], dtype=float) - 1e-9)
                  for a in model.axes)
    return np.maximum(WARP, np.ceil(count / WARP) * WARP)


def utilization(target: Target, blocks, smem, threads, active=None):
    """Fraction of the machine a launch keeps busy: idle SMs, the last partial wave, and
    too few active threads per SM to hide memory latency (fewer than 256). `threads`: per
    block as launched (what the SM's 2048 thread slots hold), `active`: those with work."""
    if not target.processors:
        return 1.0
    active = threads if active is None else active
    cap = target.levels[1].capacity_bytes
    fit = np.minimum(cap / np.maximum(smem, 1), 2048 / np.maximum(threads, 1))
    per_sm = np.minimum(np.maximum(np.floor(fit), 1), 32)     # whole blocks, 1 to 32
    procs = target.processors
    slots = procs * per_sm
    waves = np.ceil(blocks / slots)
    # blocks / procs when some SMs idle, 1 when one wave holds them all, else the last wave's
    # share: blocks / (waves * the slots a wave fills)
    busy = blocks / (waves * np.minimum(slots, np.maximum(blocks, procs)))
    occupancy = np.minimum(1.0, np.minimum(per_sm, np.ceil(blocks / procs)) * active / 256)
    return np.maximum(busy * occupancy, 1e-6)
