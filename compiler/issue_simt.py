"""A CUDA-core kernel's issue slots beyond its ops: its copies into shared memory, its reads
of them, its stores, its chunks (issue.py charges the ops, INSTRUCTIONS).

The constants are counted in, or fitted to, the SASS of the library's CUDA-core kernels
(sm_90, h100 plans at the default sizes and at 4096, `benchmarks/model_check.py --kernels`:
each loop of a block weighted by its trips, benchmarks/sass_simt.py; static counts, every
path once, not a measurement).
"""

from __future__ import annotations

import numpy as np

from . import ir
from .choices import NUMBERS, prod
from . import across_warps, copies, issue_pair, lanes
from .copies import COPY_ROW
from .passes import staged_once

WARP = 32
# (a copy's COPY_ROW, COPY_EACH and COPY_FLAT: compiler/copies.py, which decides by them)
# A value read into a register (the model's register-level H): LDS (LDG where not staged),
# its conversion to f32 where it is 16-bit (HADD2.F32), and the lane loop's share of its
# index, clamp and step, per value and lane (fitted with STORE: rmsnorm at 4096 within 5%,
# its reduction loops 68 per 16 values, its output loops 76 per 4). A 16-bit value 3: LDS,
# HADD2.F32 and the loop's 11 per 16 values (cross_entropy's row loops, sm_90, static); 4
# while a row the lanes' loops read again was counted once (loop_reads, below).
READ = 3
READ_NARROW = 3
# ... but a value read in a walk of the lanes' split axis the lowering unrolls (compiler/
# lanes.py, codegen/held.py: each trip at a constant offset from the lane, a streamed load's
# value at a key named once for the thread's rows, a held load's read once before the loop)
# is its LDS alone, and its HADD2.F32 where it is 16-bit: no index, clamp or step, 32 or 64
# bits alike. Counted in attention's key loop on the CUDA cores (sm_90, static, h100 plan at
# the default sizes, 16 lanes splitting d = 64: 32 LDS and 32 HADD2 per group of 4 keys and
# thread, its 4 + 4 values of K and V a key; READ_NARROW and INDEX_WIDE charged 8.5 each).
READ_UNROLLED = 1
READ_CONVERT = 1
# An output element stored: its index clamped to the array, the in-range test, the 64-bit
# address and STG (and F2FP to 16 bits), per element and lane, beside its ops: 11 in
# rmsnorm's output loop at 4096 (76 for 4 elements: 2 LDS and their conversions, 2 FMUL,
# F2FP, the rest the index and store), fitted with ITERATION and BLOCK_BASE below.
STORE = 11
# A load read from global memory where it is used (a view's or a gather's source, not
# staged: schedule._staged), per point of the kernel, pass and lane, beyond its READ: its
# index clamped to the array and its 64-bit address (embedding's and rope's gathers:
# fitted within 45%).
UNSTAGED = 10
# (A store copying a row of a load value by value, where the row is no multiple of a run:
# each value's gathered read shares its store's position and clamp, so UNSTAGED is not
# charged for it: embedding at m = 769, static SASS/model 0.78 -> 0.97.)
# A store copying a row of a load in runs (compiler/row_runs.py: embedding), per run of a
# thread's consecutive points and lane, everything the kernel reads and stores (its only
# loads are the row's and its position's, nothing staged): the position's load and clamp,
# the run's in-range test, its source and destination addresses, one 16-byte LDG and STG.
# Counted in embedding's SASS (sm_90, static, default sizes and 4096, one run a lane and 32
# a block): 16, the position's LDG and clamp (10), the two 64-bit addresses, LDG.128 and
# STG.128 (6). (14 was fitted while the estimate read the version of the blocks' loop nvcc
# specialised for the sizes it does not take: sass_simt.blocks_loop.)
ROW_RUN = 16
# Per chunk and warp (a streamed kernel's): the two barriers, the chunk's length, the loop
# test. The chunk's lane loop (its set-up and the remainder nvcc peels off it, some 145 a
# chunk in softmax's at 4096) is LANE_LOOP's.
ITERATION = 12
# In a kernel that indexes in 64 bits (Schedule.index, compiler/index_width.py), each value a
# lane reads or stores more: its clamps as ISETP pairs (.U32, .EX) and 64-bit SEL, its
# offsets as IMAD.WIDE pairs, per value and lane beside READ, STORE and UNSTAGED; counted in
# rope's block at 4096 against the same plan at 1024 (sm_90, static: 781 against 598 per
# warp for 8 points of 5 values each, 4.6 a value; the only library kernel on the CUDA cores
# that indexes in 64 bits).
INDEX_WIDE = 4.5
# Per loop of a lane over a row (a reduction's `for (j = lane; j < n; j += w)`, a streamed
# chunk's `for (xl = lane; xl < clen; xl += w)`, an output row's `for (k = 0; k < ceil(n / w);
# ++k)`), per warp: its trip count and the tests of each stage nvcc unrolls it into (by 4, by
# 16 where the body is short), and the remainder it peels off the unrolled body (up to 3, or
# 15, bodies), which a static count holds once per run of the loop. Counted in the SASS of
# the library's CUDA-core kernels (sm_90, static, every path once): 130-180 per loop in
# cross_entropy's, softmax's and layernorm's blocks at the default sizes (a row of 1024 in
# one warp), 145 per chunk and pass in softmax's at 4096, 80-100 in rmsnorm's and
# layernorm's at 4096; 130. At run time the remainder runs `trip mod unroll` bodies only: a
# dynamic count would be lower (CALIBRATE on a GPU).
LANE_LOOP = 130
# the loops a reduction walks over its row (codegen/scalar.py): a variance its mean then its
# squares, a logsumexp and a softmax's statistics a maximum then a sum of exponentials; one
# (a running max and rescaled sum) where the row is read from global memory (Model.online)
LOOPS = {"logsumexp": 2, "var": 2, "softmax": 2}
# The merge of the lanes' states after a pass whose streamed axis they split (the decode
# merge kernel's, a streamed softmax's), per butterfly step and state a thread holds: a
# running max and sum (an online softmax's or a logsumexp's) two SHFL, the larger max and
# its shift, two rescaling exponentials (cexpr.shifted_exp: FADD, FMUL, MUFU.EX2 each; IEEE
# expf, 9 each, made it 25), the sum's FMUL and FFMA;
# each element of the rescaled output beside them its SHFL, FMUL and FFMA; a sum's or a
# max's slot its SHFL and FADD. Counted from codegen/lane_merges.merge and in the SASS of the
# decode merge kernel (attention, b = h = q = 1, x = 4096, sm_90, static: its five steps).
MERGE_STATE = 13
MERGE_RESCALED = 3
MERGE_VALUE = 2
# ... a variance's (Chan's merge of Welford's count, mean and sum of squares, lane_merges.merge_one):
# three SHFL, the counts' sum and its guard, the means' difference, two IEEE divisions (each
# MUFU.RCP, five FFMA, FCHK and its slow path's call, some 14 static) and the FMUL and FFMA
# around them: 38 a step in layernorm's at the small shape (sm_90, static, h100); charged
# 3 x MERGE_VALUE = 6 as three plain slots before. A streamed mean merges its sum alone
# (accum.STREAMED: its count is the sizes'), MERGE_VALUE, not the (max, sum) pair's
# MERGE_STATE its two model slots drew.
MERGE_VARIANCE = 38
# Per block and warp: what every launched block runs once before its blocks' loop (its
# parameters, the thread's coordinates: 27-76 instructions in the library's CUDA-core
# kernels, sass_simt.entry_path; the grid is every block, runtime/launches.py), the loop's
# test and the thread's points' validity (fitted with DIVISION to the CUDA-core kernels of
# model_check --kernels: embedding's block is 94 a warp, 49 before its loop and 45 in it
# with two divisions and one run; 30 while the estimate left out what runs before the loop)...
BLOCK_BASE = 44
# ... and the tile's origin along each woven axis whose size is a launch's (not fixed by the
# diagram): the block index's remainder by the tiles along it and its quotient, a 32-bit
# division by a runtime divisor (index_width.block_type: I2F, MUFU.RCP, F2I and the
# correction, some 19 instructions in the decode merges' loops, or 10 in embedding's where
# nvcc hoists the reciprocal, its 7 before the loop, which every block runs too).
DIVISION = 17


def warp_instructions(model, choice, sizes: dict, level1: dict, threads, chunks, fraction,
                      H: list, units, wide=False, reads=()) -> tuple:
    """(lane instructions, warp instructions) a CUDA-core kernel issues beyond its ops:
    reads of shared memory and stores per lane; copies, chunks and blocks per warp. `wide`:
    the kernel indexes in 64 bits (per candidate); `reads`: (load, bytes the register level
    moves of it), H[1]'s share of each load (see `unrolled_reads`)."""
    warps = NUMBERS.ceil(threads / WARP)
    per_block, copied = 0, {}
    # a streamed load staged once (passes.staged_once): copied in its first pass's chunk only
    once = staged_once(model, choice.warps, sizes, choice.stream)
    copies_of = NUMBERS.where(once, chunks / max(model.streaming.passes, 1), chunks) \
        if once is not False else chunks
    for a in model.arrays:
        if a.role != "load" or a.unstaged:
            continue
        key = (a.axes, a.bytes)      # (what a copy's cost depends on: K's is V's)
        if key not in copied:
            copied[key] = _copy(a, choice, sizes, level1, threads, model.fixed)
        copy = copied[key]
        per_block = per_block + (copies_of * fraction * copy if a.streamed else copy)
    narrow = min((a.bytes for a in model.arrays if a.role == "load" and a.bytes),
                 default=4)        # (draw's table prices one array at a time, the rest 0 bytes)
    # the values read in an unrolled walk of the split axis at their own cost, the rest of
    # the register level's H at READ's
    held_bytes, held_values, held_read = unrolled_reads(model, choice, sizes, reads)
    # (a load read from global memory where it is used is read per `direct_reads`, below,
    # not per what the register level moves of it)
    gathered = sum(vol for a, vol in reads if a.unstaged)
    # the staged rows the lanes' loops read, once per loop (`loop_reads`), not per H
    looped_bytes, looped_values, looped_read = loop_reads(model, choice, reads)
    rest = (H[1] if len(H) > 1 else 0) - held_bytes - gathered - looped_bytes
    read = rest / narrow * (READ_NARROW if narrow == 2 else READ) + held_read + looped_read
    # (each element by every lane of a split of an axis it lacks: issue_pair.beside)
    stored = sum(prod(sizes[x] for x in a.axes) * issue_pair.beside(choice, a.axes)
                 for a in model.arrays if a.role == "store")
    # a load read where it is used, from global memory (a view's or a gather's source): at
    # every point of the ops reading it (`used_over`: a mask's document ids doc[q] at each
    # score, not at each score and d), else of the kernel's largest op or its stores, once
    # per value a lane reads (`direct_reads`)
    widest = max(model.work, key=lambda w: prod(sizes[x] for x in w.axes), default=None)
    over = widest.axes if widest is not None else None
    direct = direct_read = 0.0
    for a in model.arrays:
        if a.role == "load" and a.unstaged:
            n = direct_reads(model, choice, sizes, a, a.used_over or over, stored) * \
                model.streaming.passes
            # in an unrolled walk of a split axis the load has (paged attention's K at a key:
            # the lane's 4 positions of d), its values share one address at constant offsets:
            # UNSTAGED once per address, each value its LDG and conversion
            trips = walk_trips(model, choice, sizes, a)
            per = np.where(trips > 1, READ_UNROLLED + (READ_CONVERT if a.bytes == 2 else 0),
                           READ_NARROW if a.bytes == 2 else READ)
            direct = direct + n / trips
            direct_read = direct_read + n / trips * UNSTAGED + n * per
    lanes = read + stored * STORE + direct_read
    # (values indexed in 64 bits: H's bytes of the stores are their elements', counted once)
    stored_bytes = sum(prod(sizes[x] for x in a.axes) * a.bytes for a in model.arrays
                       if a.role == "store" and a.node not in model.across)
    values = (rest - stored_bytes) / narrow + stored + direct + looped_values
    for n, axis, width in model.rows:     # a store copying a row of a load in runs (one a
        runs = _in_runs(choice, sizes, level1, axis, width)     # kernel): all it does, and
        # (nothing staged; value by value, each value's position is its store's: no index)
        lanes = (1 - runs) * (lanes - UNSTAGED * stored) + runs * stored / width * ROW_RUN
        values = (1 - runs) * values + runs * stored / width * 2
        per_block = (1 - runs) * per_block
    lanes = lanes + np.where(wide, INDEX_WIDE, 0.0) * values
    block = BLOCK_BASE + DIVISION * sum(1 for a in model.woven if a not in model.fixed)
    iteration = ITERATION if choice.stream else 0       # (no chunk loop where unstreamed)
    warp = units[0] * warps * (per_block + chunks * iteration + block +
                               LANE_LOOP * lane_loops(model, choice, chunks) +
                               merges(model, choice) + across_warps.instructions(model, choice, sizes))
    return lanes, warp


def walk_trips(model, choice, sizes: dict, a):
    """Per candidate: the trips a lane makes at one position along the split axes of load
    `a` it walks unrolled (compiler/lanes.py), 1 where none (or the walk is a loop)."""
    out = np.asarray(1.0)
    for x, ways in choice.split:       # (a Choices: ways 1 where a candidate splits none)
        if x in a.axes and x in model.reduced and (not choice.stream or x != choice.stream[0]):
            w = np.asarray(ways, dtype=float)
            out = out * np.where(lanes.unrolled(sizes[x], w, x in model.fixed), sizes[x] / w, 1.0)
    return out


def unrolled(model, choice, sizes: dict, a):
    """Per candidate: whether a thread reads staged load `a` in a walk of the lanes' split
    axis the lowering unrolls (lanes.unrolled: codegen/held.py), streamed or not: the split
    axis one of `a`'s, not the streamed axis, walked inside the streamed loop."""
    if a.role != "load" or a.unstaged or not choice.stream or choice.warps:
        return False
    out = False
    for x, ways in choice.split:       # (a Choices: ways 1 where a candidate splits none)
        if x in a.axes and x != choice.stream[0] and x in model.reduced:
            out = out | lanes.unrolled(sizes[x], ways, x in model.fixed)
    return out


def unrolled_reads(model, choice, sizes: dict, reads) -> tuple:
    """(bytes, values, lane instructions) of the register level's reads made in an unrolled
    walk of the split axis (`unrolled`), READ_UNROLLED and READ_CONVERT per value where
    16-bit; 0 where a candidate's walk is a loop."""
    moved = values = lane = 0.0
    for a, vol in reads:
        where = unrolled(model, choice, sizes, a)
        if not np.any(where) or not a.bytes:
            continue
        n = np.where(where, vol / a.bytes, 0.0)
        moved = moved + n * a.bytes
        values = values + n
        lane = lane + n * (READ_UNROLLED + (READ_CONVERT if a.bytes == 2 else 0))
    return moved, values, lane


def merges(model, choice):
    """Instructions per warp of the butterfly merges after the passes whose streamed axis the
    lanes split (codegen/lane_merges.merge: log2(ways) steps, every lane the same), each state a
    thread holds merged once, after the pass that accumulates it (MERGE_*); 0 where no
    candidate splits the streamed axis."""
    if not choice.stream:
        return 0.0
    ways = dict(choice.split).get(choice.stream[0], 1.0)
    # (shuffles within a warp: a split over several then merges the warps, across_warps.py)
    steps = np.log2(np.clip(np.asarray(ways, dtype=float), 1.0, WARP))
    thread = dict(choice.thread)
    paired = {c for _, c in model.streaming.pairs}
    kinds = {w.node: w.op for w in model.work}
    per_step = 0.0
    for a in model.arrays:
        if a.role != "accumulator":
            continue
        held = prod(thread[x] for x in a.axes if x in thread)
        if kinds.get(a.node) == "var":
            per_step = per_step + held * MERGE_VARIANCE
        elif kinds.get(a.node) == "mean":
            per_step = per_step + held * MERGE_VALUE
        elif a.slots == 2:
            per_step = per_step + held * MERGE_STATE
        else:
            per_step = per_step + held * a.slots * (
                MERGE_RESCALED if a.node in paired else MERGE_VALUE)
    return steps * per_step


def direct_reads(model, choice, sizes: dict, a, over, stored):
    """Lane reads of unstaged load `a` (from global memory where used) over the points of
    `over` (the axes of the ops reading it; None: the kernel's stores, `stored` points): a
    lane reads each value once for all its points that share it (the emitter names a load
    once per position and index, nvcc merges the repeated reads of the read-only arrays:
    paged attention's LDG of a K value per key and lane serves the thread's 8 rows, sm_90,
    static). A thread shares a value over its tile along the axes `a` does not have, and a
    lane over its trips along a split axis `a` does not have; where `a` is read inside the
    walk of a reduced axis (not the streamed one), across the thread's tile only if that
    walk is unrolled (compiler/lanes.py), else each point walks it for itself."""
    if over is None:
        return stored
    thread = dict(choice.thread)
    ways = dict(choice.split)       # (a Choices: ways 1 where a candidate splits no axis)
    walked = True       # every reduced axis of `a` a point walks, walked unrolled
    for x in a.axes:
        if x in model.reduced:
            unrolled = lanes.unrolled(sizes[x], ways.get(x, 1.0), x in model.fixed)
            if choice.stream and choice.stream[0] == x:     # position by position where
                unrolled = unrolled | (np.asarray(choice.stream[1]) > 0)    # streamed (chunk 0:
            walked = walked & unrolled                                   # a set's unstreamed)
    shared = 1.0
    for x in over:
        if x in a.axes:
            continue
        if x in thread:
            shared = shared * np.where(walked, thread[x], 1.0)
        elif x in ways:         # (ways 1: a set's candidate not splitting it, as none)
            w = np.asarray(ways[x], dtype=float)
            shared = shared * np.where(w >= 2, np.ceil(sizes[x] / w), 1.0)
    return prod(sizes[x] for x in over) / shared


def _in_runs(choice, sizes, level1, axis, width):
    """1 where a candidate copies the store in runs of `width` along `axis`, else 0 (as
    row_runs.runs decides: the thread's tile `width` along it and 1 along the others, the
    block tile and the axis's size multiples of it, no stream, no split)."""
    if choice.stream or choice.split or np.mod(sizes[axis], width):
        return 0.0
    thread = dict(choice.thread)
    fits = np.asarray(thread.get(axis, 1)) == width
    fits = fits & (np.mod(np.asarray(level1[axis]), width) == 0)
    for a, t in choice.thread:
        if a != axis:
            fits = fits & (np.asarray(t) == 1)
    return np.where(fits, 1.0, 0.0)


def loop_reads(model, choice, reads) -> tuple:
    """(bytes of the register level's H, values, lane instructions) of the staged loads the
    lanes' loops over a row read without a stream: each of the loops reading a load
    (model.loop_reads: its reductions' loops, LOOPS, and its stores' along the row) reads
    what the register level moves of it, READ or READ_NARROW a value; H counts a load once,
    not per loop (cross_entropy's logits: once, read by three loops). What the register
    level moves is every thread's own reads: a tile read by the threads of other positions
    along an axis the load lacks is read by each of them (swiglu's first kernel at the small
    shape: X[t m] by the 8 threads along f of its 8 x 8 block, each a loop over m; counted
    as the block's tile once a loop, the lanes' loops read 1/8 of it, static SASS/model 1.76)."""
    if choice.stream or not model.loop_reads:
        return 0.0, 0.0, 0.0
    moved = dict((a.node, (a, vol)) for a, vol in reads if a.role == "load" and not a.unstaged)
    means = {w.axes for w in model.work if w.op == "mean"}
    work = {w.node: w for w in model.work}
    out_bytes = values = lane = 0.0
    for n, readers, stored in model.loop_reads:
        if n not in moved or not moved[n][0].bytes:
            continue
        a, vol = moved[n]
        loops = stored + sum(_loops(model, work[r], means) for r in readers if r in work)
        count = vol / a.bytes * loops
        out_bytes = out_bytes + vol
        values = values + count
        lane = lane + count * (READ_NARROW if a.bytes == 2 else READ)
    return out_bytes, values, lane


def _loops(model, w, means) -> int:
    """The loops over its row reduction `w` walks (LOOPS; one where a variance's mean is the
    kernel's own, or where the row is read from global memory: Model.online)."""
    if (w.op == "var" and w.axes in means) or w.node in model.online:
        return 1
    return LOOPS.get(w.op, 1)


def lane_loops(model, choice, chunks):
    """Loops over a row each thread runs per block (see LANE_LOOP): with a stream, one per
    chunk and pass (the chunk's lane loop folds every accumulator); without, one per
    reduction over the kernel's reduced axes (LOOPS) and one per output along them, for each
    row a thread holds."""
    reduced = set(model.reduced)
    if choice.stream:
        return chunks
    rows = prod(n for a, n in choice.thread if a not in reduced)
    # a variance is canonicalised from mean((X - mean(X))^2): where that mean is an op of the
    # kernel too (layernorm's mu), the variance's mean is its loop (codegen/scalar.py)
    means = {w.axes for w in model.work if w.op == "mean"}
    loops = sum(_loops(model, w, means) for w in model.work
                if reduced & set(w.axes) and (w.op in LOOPS or w.op in ir.REDUCTIONS or
                                              w.op == "contract"))
    loops += sum(1 for a in model.arrays if a.role == "store" and reduced & set(a.axes))
    return rows * loops


def _copy(a, choice, sizes: dict, level1: dict, threads, fixed=frozenset()):
    """Warp instructions per warp of one copy of load `a`'s tile (see COPY_*), per candidate:
    its inner axis the last it holds more than one position of (copies.inner_axis)."""
    chunk = dict([choice.stream]) if choice.stream else {}
    found, rows, length, size, last, static = False, 1.0, 1.0, 1.0, False, False
    for i in reversed(range(len(a.axes))):
        h = np.asarray(chunk.get(a.axes[i], level1[a.axes[i]]), dtype=float)
        take = ~np.asarray(found) & (h != 1)
        # a constant length (a chunk, a tile less than the axis, a fixed size): staging._each
        # copies a row of no more vectors than threads in one `if`, not a loop
        known = a.axes[i] in chunk or a.axes[i] in fixed or h < sizes[a.axes[i]]
        static = np.where(take, known, static)
        rows = np.where(found, rows * h, rows)
        length = np.where(take, h, length)
        size = np.where(take, float(sizes[a.axes[i]]) if np.ndim(sizes[a.axes[i]]) == 0
                        else sizes[a.axes[i]], size)
        last = np.where(take, i == len(a.axes) - 1, last)
        found = np.asarray(found) | take
    # (a row along another axis than the array's last steps by a stride of runtime sizes)
    _, _, copy = copies.row_copy(rows, length, size, a.bytes, threads, last, static & last,
                                 static)                  # (as copies.width decides it)
    out = np.where(found, copy, COPY_ROW)
    return float(out) if np.ndim(out) == 0 else out
