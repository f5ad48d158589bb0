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

The concepts it combines live beside it: `costs.py` (the records it returns: `Cost`,
`LevelCost`), `choices.py` (the decisions and the arithmetic on numbers, arrays and
symbols), `issue.py` (compute time from the instructions a kernel
issues), `occupancy.py` (registers, blocks per SM, the fraction of the GPU busy),
`memory.py` (shared-memory buffers as allocated; HBM and L2), `masking.py` (chunks a mask
hides), `extents.py` (the covered and resident extents above), `flops.py` (FLOPs per engine
and their rates).
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from . import (across_warps, added, column_epilogue, gather_reads, index_width, issue,
               occupancy, packing, waits)
from .columns import Column, resident_sets
from .extents import covered, launched_threads, resident, step, walked
from .choices import NUMBERS, Choice, Choices, Symbols, any_of, number, prod, total
from .costs import Cost, LevelCost
from .flops import rate, work_extents, work_flops
from .headpad import padded_extent as extent
from .fractions import along_bytes, computed_fraction, cut_fraction, iterated_fraction, spans
from . import lsu
from .memory import PIPELINE, allocated, in_place, l2_split, sectors, stage_bytes, staged_bytes
from .model import Model, flash_state
from .passes import global_passes, staged_once
from .target import Target


# Predicted time: the slowest of compute and each level's transfers (they overlap), plus a
# little of the others (overlap is never perfect), over the fraction of the GPU kept busy,
# plus a launch.
OVERLAP = 0.05
LAUNCH_SECONDS = 2e-6
WARP = 32
def evaluate(model: Model, cols: tuple[Column, ...], choice: Choice | Choices, sizes: dict,
             target: Target, symbolic: bool = False, values: bool = False,
             beside: tuple[float, float | None] = (0.0, None),
             fitting: bool = False) -> Cost | None:
    """Costs of one kernel plan, or of every candidate of a set (the module docstring);
    `values=True` counts values instead of bytes. `beside`: (shared-memory bytes, registers
    per thread) of code the kernel also runs (a split's merge in its last block,
    last_block.py): its blocks hold those bytes too, and at least those registers.
    `fitting`: None as soon as the footprints show that no candidate fits (a search then
    has none; the compute, occupancy and bandwidth terms are not computed)."""
    ops = Symbols() if symbolic else NUMBERS
    sizes = packing.sized(model.packed, sizes)
    if isinstance(choice, Choices):   # arrays: in floats (a Python int may pass int64's range)
        sizes = {a: float(v) for a, v in sizes.items()}
    choice = Choices.of(choice)
    levels = target.levels
    covs = covered(model, choice, sizes, len(levels))
    reduced = set(model.reduced)
    results = [LevelCost(levels[0].name, levels[0].capacity_bytes, 0, 0, 1, 0)]
    unit_counts, uniques, helds = [], [], []
    # the share of (block, chunk) pairs a mask lets the kernel compute (masking.py): a chunk
    # it skips is not read into shared memory nor into registers
    fraction = 1.0 if symbolic or not choice.stream else computed_fraction(
        model.mask, sizes, {**dict(choice.group), choice.stream[0]: choice.stream[1]},
        packed=model.packed)
    loads = issue.tiles(model, choice, covs[0])     # each load's tile a block copies at a time
    # a tensor-core kernel's cp.async pipeline: its depth (occupancy.stages) and the bytes
    # one stage of it keeps in flight
    pipelined = bool(choice.warps) and bool(choice.stream) and not symbolic and not values \
        and bool(target.processors) and len(levels) > 2
    flight = occupancy.in_flight(choice, loads, model.summed)
    stages = PIPELINE
    # attention's Q re-read from shared memory into registers every computed chunk
    # (Choice.reread): (its array, the chunks)
    reread = (occupancy.query_array(model, choice.warps[0][0]),
              NUMBERS.ceil(sizes[choice.stream[0]] / choice.stream[1]) * fraction) \
        if choice.reread is not False and not symbolic and flash_state(model) else None
    atomics = 0.0       # adds of a chain's products over its rows (chain.Across, added.py)
    reads = []          # (load, bytes the register level moves of it: issue_simt.reads)
    # a CUDA-core kernel of several passes whose one chunk holds the streamed axis reads
    # its streamed loads from global memory once (passes.staged_once, Schedule.resident)
    once_staged = staged_once(model, choice.warps, sizes, choice.stream)
    for li, lv in enumerate(levels[1:], start=1):
        cov = covs[li - 1]
        across = {a: sizes[a] / cov[a] for a in model.axes}   # units side by side along a
        units = prod(across.values())
        # the units whose reads an array's traffic repeats: at least one along each axis (a
        # tile larger than its axis, a 16-row fragment over one query row, still reads
        # everything the axis's one unit needs)
        repeats = across if symbolic else {a: np.maximum(r, 1.0) for a, r in across.items()}
        unit_counts.append(units)
        if li == 1:     # the blocks launched: one at least along each axis (what fills SMs)
            launched = prod(repeats.values())
        res_of = [resident(arr, li, cov, choice, reduced) for arr in model.arrays]
        short = [{a: ops.differ(res[a], cov[a]) for a in arr.axes} if arr.role == "load"
                 else None for arr, res in zip(model.arrays, res_of)]
        loops = walked(model, short)
        moved, unique = [], []
        # (terms loads share, once a level: axes an array lacks, walks, a sector's row)
        lacking: dict = {}
        walks: dict = {}
        sector: dict = {}
        for arr, gaps, res in zip(model.arrays, short, res_of):
            width = 1 if values else arr.bytes
            if arr.role == "load":
                passes = arr.passes
                if li == 1 and arr.streamed and not arr.unstaged:   # (a chunk staged once)
                    passes = global_passes(passes, once_staged, ops.where)
                once = prod(sizes[a] for a in arr.axes) * passes
                if arr.axes not in lacking:
                    lacking[arr.axes] = prod(repeats[a] for a in model.axes
                                             if a not in arr.axes)
                vol = once * lacking[arr.axes]
                # not resident: read again each step of its readers' walks along an axis it lacks
                along = tuple(a for a in loops if a not in arr.axes
                              and (not arr.used_over or a in arr.used_over))
                if along:
                    if along not in walks:
                        walks[along] = prod([ops.where(loops[a], cov[a] / step(a, choice, li),
                                                       1) for a in along])
                    vol = ops.where(any_of(gaps.values()), vol * walks[along], vol)
                if arr.streamed and fraction is not None \
                        and not (isinstance(fraction, float) and fraction == 1.0):
                    vol = vol * fraction
                if arr.table and li == 1 and target.processors and not symbolic:   # (L1 hits)
                    vol = gather_reads.block_reads(arr, vol, res, cov, launched, sizes)
                if reread is not None and li == len(levels) - 1 and arr is reread[0]:
                    vol = ops.where(choice.reread, vol * reread[1], vol)    # every chunk
                if symbolic or values or li > 1:
                    coalesce = 1
                else:
                    row = (arr.axes[-1] if arr.axes else None, arr.bytes)
                    if row not in sector:
                        sector[row] = sectors(arr, cov, target)
                    coalesce = sector[row]
                moved.append(vol * (width * coalesce))     # (width: a power of two)
                if li == 2:     # (the register level below shared memory: H[1])
                    reads.append((arr, moved[-1]))
                unique.append(gather_reads.unique(arr, once, sizes, passes, symbolic)
                              * (width * coalesce))
            elif arr.role == "store" and arr.node in model.across:   # (chain.Across)
                adds, *both = added.traffic(arr, sizes, repeats, model.axes, values)
                atomics = atomics + adds if li == 1 else atomics
                moved.append(both[0])
                unique.append(both[1])
            elif arr.role == "store":
                moved.append(prod(sizes[a] for a in arr.axes) * width)
                unique.append(moved[-1])
        H = total(moved)
        uniques.append(total(unique))
        last = li == len(levels) - 1
        held = {}          # array index -> what one unit holds of it (arrays counted here)
        extents: dict = {}  # the product of resident extents, once per distinct product
        per_stage = 0      # what a stage more of the streamed tiles adds
        for i, (arr, res) in enumerate(zip(model.arrays, res_of)):
            if last or arr.role == "load":     # (bytes: a power of two)
                if li == 1 and model.padded and choice.warps and not symbolic:  # (headpad.py)
                    res = {a: extent(model.padded, arr.node, a, f) for a, f in res.items()}
                factors = [res[a] for a in arr.axes]
                key = tuple(id(f) if isinstance(f, np.ndarray) else f for f in factors)
                if key not in extents:
                    extents[key] = prod(factors)
                size = extents[key] * ((1 if values else arr.bytes) * arr.slots)
                if not symbolic and not values and target.processors and not last:
                    if in_place(arr, model, choice):
                        continue            # read from global memory (a page table: per row)
                    if li == 1 and pipelined and arr.node not in model.direct:
                        per_stage = per_stage + stage_bytes(size, arr, res, choice, ops)
                    size = allocated(size, arr, res, choice, ops, sizes=sizes)
                held[i] = size
        helds.append((held, across))
        M = 0
        for together in resident_sets(cols, held, symbolic):
            M = ops.maximum(M, total(held[i] for i in together))
        if li == 1 and pipelined:
            stages = occupancy.stages(target, flight, per_stage, M, lv.capacity_bytes)
            M = M + (stages - PIPELINE) * per_stage
        time = H / lv.bandwidth if lv.bandwidth else 0
        results.append(LevelCost(lv.name, lv.capacity_bytes, M, H, units, time))
        if fitting and li == 1 and not np.any(M <= lv.capacity_bytes):
            return None     # (no candidate's blocks fit: `_may_fit` below would say so too)
    extents = work_extents(model, covs[0], choice, sizes)     # (each op's points and redo)
    flops = work_flops(model, covs[0], choice, sizes, fraction, extents)
    # with tensor cores the register level's unit is a warp: its 32 lanes hold the fragments
    # (wgmma's: a warpgroup of 128, which reads the operands and issues: compiler/wgmma.py)
    lanes = (4 * WARP if choice.instruction == "wgmma" else WARP) if choice.warps else 1
    active = lanes * unit_counts[1] / unit_counts[0] if len(unit_counts) > 1 else 1
    # the block as launched (compiler/schedule.py): whole threads per axis, whole warps; the
    # register file and the SM's thread slots are shared by these, latency is hidden by the
    # active ones
    threads = active if symbolic or len(covs) < 2 or choice.warps else \
        launched_threads(model, covs)
    # the register level's capacity (what the thread's footprint is compared with: `fits`)
    per_unit = occupancy.register_capacity(target, model, choice, sizes, results[-1].M, threads) \
        if len(results) > 2 and target.levels[-1].unit == "thread" and not symbolic \
        and target.registers_per_processor else None
    if fitting and not np.any(_may_fit(results, per_unit)):
        return None       # (what is added to the footprints below only adds to them)
    if len(results) > 1 and not symbolic and not values and target.processors and \
            choice.stream and model.mask is not None and (choice.warps or spans(model.mask)):
        # a kernel bounding its chunk loop by the mask (codegen/masks: data_span on either
        # engine, index_span on the tensor cores) reduces the block's first and last chunk
        # through shared memory: 16 bytes a warp
        results[1] = replace(results[1], M=results[1].M + 16 * np.ceil(threads / WARP))
    if len(results) > 1 and not symbolic and not values and model.across and choice.stream:
        results[1] = replace(results[1], M=results[1].M + added.staged(model, choice, covs[0]))
    if len(results) > 1 and not symbolic and not values and not choice.warps:
        # the states a split over several warps merges through shared memory
        exchanged = across_warps.exchange_bytes(model, choice, sizes, threads)
        if np.any(exchanged):
            results[1] = replace(results[1], M=results[1].M + exchanged)
    if len(results) > 1 and not symbolic and not values and choice.warps and model.staged:
        results[1] = replace(results[1], M=results[1].M + staged_bytes(
            model, choice, covs[0], helds[0][0], ops, stages))
    span = None
    if symbolic or issue.simt_only(target):
        compute = total(amount / rate(target, engine, bool(choice.warps), choice.instruction)
                        for engine, amount in flops.items())
        parts = {"compute": compute}
    else:
        # FlashAttention-2 evaluates its mask in the chunks the mask cuts only (codegen/flash.py)
        cut = cut_fraction(model.mask, sizes, {**dict(choice.group),
                                               choice.stream[0]: choice.stream[1]},
                           model.packed) \
            if choice.warps and choice.stream and flash_state(model) else None
        tiles = {**dict(choice.group), choice.stream[0]: choice.stream[1]} \
            if choice.stream else {}
        # a mask read from data bounds the chunk loop (codegen/masks.data_span): its chunks
        # outside are not iterated, and its prologue scans the streamed axis once per block
        span = None
        if choice.stream and spans(model.mask):   # (positions tested, block reductions)
            span = (iterated_fraction(model.mask, sizes, tiles, choice.stream[0],
                                      model.packed),
                    sizes[choice.stream[0]], 2)
        elif choice.stream and choice.warps and model.mask is not None:
            # a mask of indices bounds the loop by its chunks (codegen/masks.index_span)
            span = (iterated_fraction(model.mask, sizes, tiles, choice.stream[0],
                                      model.packed),
                    NUMBERS.ceil(sizes[choice.stream[0]] / choice.stream[1]), 1)
        run = functools.partial(
            issue.compute, choice=choice, sizes=sizes, target=target, level1=covs[0],
            H=[lc.H for lc in results[1:]], units=unit_counts,
            warps_per_block=np.ceil(threads / WARP), lane_share=active / threads,
            fraction=fraction, cut=cut, span=span, loads=loads, reads=reads,
            wide=index_width.wide(model.extents, sizes, choice))
        parts = run(model, extents=extents)
        looped = column_epilogue.loop_issue(model, extents, run) if model.columns and \
            choice.warps else None      # (the product's loop alone: column_epilogue.seconds)
        if not choice.warps and target.per_second("l1_wavefronts"):
            # the L1's wavefronts of the direct reads: lanes over rows take one a value
            parts["L1 wavefronts"] = lsu.seconds(model, choice, covs[0], reads, target)
        compute = functools.reduce(ops.maximum, parts.values())
    if choice.warps and not symbolic and issue.simt_only(target):
        # fragments padded past the arrays compute all the same (issue.compute counts them
        # itself: per point, per whole block)
        compute = compute * issue.padding(choice, sizes)
        parts = {k: v * issue.padding(choice, sizes) for k, v in parts.items()}
    regs = None
    if len(results) > 2 and target.levels[-1].unit == "thread" and not symbolic \
            and target.registers_per_processor:
        last = results[-1]
        regs = occupancy.registers(model, choice, sizes, last.M)
        results[-1] = LevelCost(last.name, per_unit, last.M, last.H, last.units, last.time)
    if symbolic:
        terms = [compute] + [lc.time for lc in results[1:]]
        return Cost(tuple(results), flops, compute, ops.sympy.Max(*terms), "", 1.0, threads)
    extra_smem, extra_regs = beside     # (and a product's merges of its column statistics)
    extra_smem = extra_smem + (0 if values else column_epilogue.shared_bytes(model, choice))
    if np.any(extra_smem) and len(results) > 1:
        results[1] = replace(results[1], M=results[1].M + extra_smem)
    if extra_regs is not None and regs is not None:
        regs = np.maximum(regs, extra_regs)
    per_sm, limit = occupancy.blocks_per_sm(target, results[1].M, threads, regs) \
        if target.processors else (1, 3)
    if not choice.warps and "issue" in parts and target.clock_hz:
        # a split over several warps waits at its merges across them (the barriers, the chain
        # of shared-memory reads: across_warps.cycles), less what other resident blocks issue
        waited = unit_counts[0] * across_warps.cycles(model, choice, sizes) / (
            target.clock_hz * target.processors) / per_sm
        if np.any(waited):
            parts = {**parts, "merged": parts["issue"] + waited}
            compute = ops.maximum(compute, parts["merged"])
    if not issue.simt_only(target) and choice.warps:
        # what the tensor pipe waits for in each warp: the products' dependents
        # (waits.serial) and the chunks' barriers (waits.barriers, less what the other
        # resident blocks issue meanwhile): a compute part of its own
        waited = waits.serial(parts, target, np.ceil(threads / WARP), per_sm) + waits.barriers(
            model, choice, sizes, target, launched, span) / per_sm
        chained = ops.maximum(parts["tensor"], parts["issue"]) + waited
        parts = {**parts, "chained": chained}
        compute = ops.maximum(compute, chained)
    # each wave of resident blocks waits for its first tiles (waits.fill): beside the launch
    # (a sum of products: for each pair's, as its pipeline starts)
    filled = 0.0 if issue.simt_only(target) else waits.fill(
        loads, target, launched, per_sm, occupancy.LATENCY_SECONDS * model.summed)
    util = occupancy.utilization(target, launched, results[1].M, threads, active, regs,
                                 per_sm, flight)
    named = {"compute": compute}
    for lc in results[1:]:
        named[f"{lc.name} bandwidth"] = lc.time
    if target.l2_bytes and len(results) > 1:
        hbm, l2 = l2_split(results[1], uniques[0], helds[0], model, launched,
                      target.processors * per_sm, target, ops)
        if choice.stream and spans(model.mask):   # the prologue's reads along the axis
            l2 = l2 + launched * sizes[choice.stream[0]] * along_bytes(model.mask) \
                / target.l2_bandwidth
        if pipelined:       # what the resident blocks' chunks in flight draw (Little's law)
            cover_hbm, cover_l2 = occupancy.latency_cover(
                target, np.minimum(per_sm, np.ceil(launched / target.processors)),
                flight * (stages - 1))
            hbm, l2 = hbm / cover_hbm, l2 / cover_l2
        named.pop(f"{results[1].name} bandwidth")
        named = {"compute": compute, "HBM bandwidth": hbm, "L2 bandwidth": l2,
                 **{k: v for k, v in named.items() if k != "compute"}}
        results[1] = LevelCost(results[1].name, results[1].capacity, results[1].M, results[1].H,
                               results[1].units, hbm)
    overhead = LAUNCH_SECONDS if target.processors else 0.0
    if model.columns and choice.warps and "issue" in parts:    # (after the product's loop)
        overhead = overhead + column_epilogue.seconds(model, choice, target, parts["issue"],
                                                      looped, launched, per_sm)
    if model.across and not symbolic and not values and target.processors:
        named["atomics at L2"] = atomics / target.l2_atomics if target.l2_atomics else np.inf
        finish = added.finish_bytes(model, sizes)     # the conversion kernel after it
        results[1] = replace(results[1], H=results[1].H + finish)
        overhead = overhead + finish / target.levels[1].bandwidth + LAUNCH_SECONDS
    terms = list(named.values())
    worst = functools.reduce(ops.maximum, terms)
    rest = total(terms) - worst
    time = (worst + OVERLAP * rest) / util + filled + overhead
    scalar = not any(isinstance(t, np.ndarray) for t in terms + list(parts.values()))
    cost = Cost(tuple(_plain(lc) for lc in results), {k: number(v) for k, v in flops.items()},
                compute, time, None, util, threads, tuple(named.items()),
                tuple(parts.items()), regs, per_sm, limit, fraction,
                span[0] if span is not None else 1.0, stages)
    return _plain(replace(cost, bound=cost.name_bound()) if scalar else cost)


def _may_fit(results: list, per_unit):
    """Per candidate, whether every level's footprint so far is within its capacity (the
    register level's `per_unit` where known): `pick.fits` before shared memory's additions."""
    ok = True
    for i, lc in enumerate(results[1:], start=1):
        cap = per_unit if per_unit is not None and i == len(results) - 1 else lc.capacity
        ok = ok & (lc.M <= cap)
    return ok


def _plain(record):
    """The record with NumPy scalars as Python numbers (arrays stay arrays); the record itself
    when it holds none."""
    kinds = {f: v.item() for f, v in record.__dict__.items()
             if f not in ("levels", "flops", "name") and (
                 isinstance(v, np.generic) or isinstance(v, np.ndarray) and v.ndim == 0)}
    return type(record)(**{**record.__dict__, **kinds}) if kinds else record
