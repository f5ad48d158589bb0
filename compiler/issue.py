"""Compute time from what the kernel issues: instructions per element per engine, issue slots.

Each op of a kernel costs, per element it computes, lane-instructions of three classes
(the table below, counted from what the lowering emits: `codegen/cexpr.py`,
`codegen/accum.py`, `codegen/scalar.py`, `codegen/flash.py`, `codegen/mma.py`):

- `fp32`: FADD/FMUL/FFMA/FMNMX/FSEL/FSETP (the FP32 pipe),
- `mufu`: MUFU.EX2/LG2/RSQ/RCP/TANH (the special-function unit, 16 lanes/clock/SM),
- `other`: integer and address arithmetic, conversions, moves, predicates.

A tensor-core kernel issues its products as HMMA (one per 16x8x16 fragment product) and
its shared-memory reads as LDSM (one per 512 bytes a warp reads); a CUDA-core kernel reads
its operands with one LDS lane per 4-byte value the register level moves (the model's
register-level H). Every chunk costs each warp a fixed loop overhead (barriers, cp.async
commit and wait, the loop and its pointers) and every copy into shared memory its address
arithmetic. What shares the warp schedulers' issue slots adds up; each pipe (tensor, FP32,
MUFU) is also a limit of its own; compute time is the largest of these (the rates per SM
per clock are in the target's `[issue]` table, the tensor rate in `[compute]`).

The table is static evidence: `benchmarks/model_check.py` compares it with the SASS of
napkin's own cubins (cuobjdump, no GPU). Calibrate against measured times on a GPU
(`benchmarks/gpu_check.py`). What the pipes wait for beyond the issue slots (the products'
dependence, the barriers, the pipeline fill) is waits.py's.
"""

from __future__ import annotations

import numpy as np

from . import added, fold, issue_pair, issue_simt, occupancy, packing, wgmma
from .choices import NUMBERS, prod, total
from .copies import tensor_copies
from .flops import work_extents
from .model import flash_state
from .headpad import ratio
from .issue_flash import (FLASH_BIAS_INDEX, FLASH_INDEX, FLASH_INDEX_WIDE, FLASH_PER_HMMA, FLASH_REREAD,
                          FLASH_RESCALE, FLASH_ROW_EXPS, FLASH_SCORE)
from .issue_mask import MASK_POSITIONS, key_only, mask_ops, per_key_chunk
from .target import Target
from .tiled_work import blocks_padding, chunk_count, padding, tiles

WARP = 32
HMMA_FLOPS = 2 * 16 * 8 * 16       # one mma.sync.m16n8k16
LDSM_BYTES = 512                   # ldmatrix.x4: 32 lanes x 16 bytes
# A tensor-core kernel's chunk, per warp (codegen/mma.py's pipeline), counted in the SASS of
# the library's matmul and attention main loops (sm_90, benchmarks/model_check.py): the
# iteration (cp.async commit and wait, the barrier, the stage flip, the loop test) ...
ITERATION_TENSOR = 20
# ... and each tile copied into shared memory: compiler/copies.py's TENSOR_* (per round of
# the block's threads, by the width and the loop codegen/tiles.py emits) ...
# ... a K or V tile whose rows come through computed positions (a paged cache's page table:
# Model.gathered, codegen/tiles._element) computes each copy's row offset instead of
# stepping a pointer: the row's key, its positions (the page-table LDG, the clamps, a signed
# 64-bit division and remainder by the page size, the page clamped to the cache) and the
# 64-bit address, per round of copies and lane, ONCE for all the gathered tiles: nvcc shares
# a round's positions between K and V (the same expression; V's copy is two IADD3 and its
# LDGSTS past K's). Counted in paged_attention's main loop (sm_90, static, h100 plan at the
# default sizes, one copy a thread of K and of V, 16 keys: 77 instructions for both copies,
# 32 of them the plain copies'; the positions are long long whatever the kernel indexes in).
# (It was 10 per gathered copy, K and V each, fitted to 683 and 724 instructions a chunk of
# older plans: 20 a round, paged_attention 1.28 static SASS/model.)
COPY_GATHERED = 45
# ... and after its chunk loop each lane stores the output fragments it holds, one element at
# a time (codegen/mma.py's epilogue, the same in codegen/flash.py): the element's row and
# column, its bounds test on the 64-bit sizes, the clamped 64-bit address, the pack to 16
# bits and the STG, per element and lane (the epilogue's ops are the table's, INSTRUCTIONS).
# Counted in the SASS of matmul's epilogue (sm_90, benchmarks/sass_loops.epilogue: 2353
# instructions for the 128 elements a lane holds of a 64 x 64 warp tile, 18.4 each; an f32
# store 17.4: no pack; batched_matmul's three axes 22.4, 26.4 where the kernel indexes in
# 64 bits).
STORE_ELEMENT = 18
# (a CUDA-core kernel's copies, reads of shared memory, stores and chunks: issue_simt.py)

# lane instructions per element: (fp32, mufu, other). expf is IEEE (no fast math): range
# reduction by FFMA, MUFU.EX2, the exponent by integer ops; division is MUFU.RCP and a
# Newton step with its check.
INSTRUCTIONS = {
    "contract": (1, 0, 0.5), "add": (1, 0, 0), "sub": (1, 0, 0), "mul": (1, 0, 0),
    "neg": (1, 0, 0), "max": (1, 0, 0.5), "min": (1, 0, 0.5), "where": (1, 0, 0),
    "lt": (1, 0, 0), "le": (1, 0, 0), "gt": (1, 0, 0), "ge": (1, 0, 0), "eq": (1, 0, 0),
    "and": (0, 0, 1), "or": (0, 0, 1), "not": (0, 0, 1), "abs": (1, 0, 0),
    "div": (6, 1, 1), "exp": (6, 1, 2), "exp2": (2, 1, 0), "log": (8, 1, 2),
    "log2": (3, 1, 1), "sqrt": (4, 1, 1), "rsqrt": (2, 1, 0), "tanh": (10, 1, 2),
    "sigmoid": (8, 2, 2), "silu": (9, 2, 2), "gelu": (18, 2, 2),
    # libdevice's erff, log1pf, expm1f (counted in the SASS of a CUDA-core kernel of each
    # beside one of a multiply, sm_90, static: every path once; erf in the library's gelu
    # beside the same arithmetic without it, where nvcc does not move its constants into
    # registers as it does for erf alone: 8 other then; sinf and cosf are left at DEFAULT:
    # their static count is mostly the slow range reduction a typical argument skips)
    "erf": (18, 1, 1), "log1p": (18, 0, 12), "expm1": (18, 0, 5),
    # a mean's and a variance's count is their sizes' on CUDA cores (codegen/scalar.py: one
    # FADD less per element than when each element counted itself, in the SASS of
    # layernorm's loops); beside a tensor-core product they count (STAGED_COUNT)
    "sum": (1, 0, 0.5), "mean": (1, 0, 0.5), "var": (3, 0, 1), "logsumexp": (7, 1, 1),
    # a logsumexp's and a softmax's statistics over a staged row, per score: the max loop, then
    # the sum of exponentials (cexpr.shifted_exp; with IEEE expf (10, 2, 2) and (16, 2, 4),
    # refitted to cross_entropy's and softmax's SASS, model_check.py --kernels, 2026-12-07)
    "softmax": (8, 1, 1),
    # a scan's fold (model.Work.prefix: each of a point's folds): its FADD or FMUL, and the
    # prefix loop's read of the operand from memory (address, LDG) and index, test and branch;
    # a model estimate, not fitted to SASS
    "cumsum": (1, 0, 3), "cumprod": (1, 0, 3),
}
# A sum, mean or variance walked on the CUDA cores (codegen/scalar.py's lane loop), per value:
# its FADD; the loop's index, test and step are the value's READ's share (issue_simt.READ), not
# the reduction's (INSTRUCTIONS' `other`). A sum or mean of a product the loop computes is one
# FFMA, the product's (nvcc fuses the FMUL and FADD); a variance of a row walked twice adds the
# difference from the mean (FADD) and its square (FFMA). Counted in rmsnorm's and layernorm's
# lane loops (sm_90, static, h100 plans at 4096: 16 values a trip of LDS.U16, HADD2.F32 and
# the FFMA, or FADD, and some 14 of the loop's, 3.9 a value where the table priced 5.5).
SIMT_REDUCE = {"sum": (1, 0, 0), "mean": (1, 0, 0), "var": (2, 0, 0)}
# ... and a softmax not paired with a contraction writes each probability: its exponential
# (cexpr.shifted_exp: FADD, FMUL, MUFU.EX2) times the row's reciprocal, computed once per row
# (one FMUL; an IEEE division per probability was 14 more per score and lane, IEEE expf
# (7, 1, 2) in all: the output loops of softmax on CUDA cores, sm_90, static, 82 per 4 scores
# with the read and the store before ex2, 38 after)
SOFTMAX_NORMALISED = (3, 1, 0)
# A logsumexp's or softmax's statistics on CUDA cores, per score, streamed or over a whole row
# read from global memory (codegen/accum.py fold_value; Model.online): the running max, one
# exponential (the smaller of the max and the score shifted by the larger), the sum rescaled
# or added to, selected. Counted by class in softmax's streamed statistics loop (sm_90,
# static, h100, r = c = 4096 with c streamed by 256: 80 instructions per 4 scores, 12 of them
# the scores' READ_NARROW, LDS, HADD2.F32 and the loop's step): the NaN-propagating
# napkin_max and napkin_min (FSETP.GT, FSETP.NAN, two FSEL; the min's compare and FSELs
# beside the shared NaN test) and napkin_shift (FSETP.NEU, FSEL) are 5 FSETP and 5 FSEL, the
# shifted argument, the new score's difference and the two sums 4 FADD, the exponent's FMUL
# and the rescale's FFMA: 16 FP32-pipe, one MUFU.EX2, nothing else. (11, 1, 2) before,
# fitted as if those 80 were 68 (the read left in): cross_entropy's staged kernel at
# t = 4096, v = 50256 SASS/model 1.14, its lane loop 98 instructions per 4 logits where 80
# were priced; (15, 1, 4) with IEEE expf, 106 per 4 scores.)
STREAMED_STATS = (16, 1, 0)
# A variance streamed on CUDA cores (Welford's update, codegen/accum.py: the count, the
# difference from the running mean, the mean moved by it over the count, the sum of squares
# by its product with the new difference), per value: its IEEE division is MUFU.RCP, five
# FFMA and FCHK, and the slow path's call set up on every path (BSSY, BSYNC, the branch,
# three moves and the CALL: a static count holds them), four FADD and an FFMA beside it.
# Counted in layernorm's lane loop at c = r = 77 x 130 (sm_90, static, h100: 20 a value
# beside its read and the loop's step, one FADD of them the mean's own); the table's `var`
# (3, 0, 1) is the squares' mean of a variance walked twice, which made the one-pass
# streamed form look 5x cheaper than it is.
STREAMED_VAR = (11, 1, 7)
DEFAULT = (1, 0, 0)
CHAIN_EXP = (1, 1, 0)              # FMUL by log2(e) and MUFU.EX2 (a chain's operands)
# A mask read from data (codegen/masks.data_span): the block's prologue tests its share of the
# streamed axis's positions (the loop, the index test, the load where it may hold, the
# comparisons, the running least and greatest: per position and lane), then takes the least
# and greatest over the block twice (shuffles, two barriers, the warps' values: per warp,
# each SPAN_REDUCE). A mask of indices (masks.index_span) tests its share of the chunks the
# same way, whole chunks, and reduces once. Counted from the emitted C; varlen's SASS (sm_90)
# issues about 33-43 per position up to the block's last row, 7 past it (the causal test
# first): not fitted, as the estimate does not count the prologue (a few per cent of it).
SPAN_POSITION = 10
SPAN_REDUCE = 30
# A product's operand computed from loads as it is staged, or a reduction beside the product
# (Model.staged; codegen/tiles._copy_computed, codegen/rowstats.py): per run of a lane (8
# consecutive positions from one 16-byte load of each load, or one position), its index,
# test and branch (and an operand's 16-byte or 2-byte store), per load read its address and
# LDG, per value and load its unpacking to f32, per value of an operand its rounding; the
# arithmetic is the ops' own (INSTRUCTIONS). Fitted to rmsnorm_linear's main loop (sm_90,
# 64 x 128 blocks: the operand's run is some 70 instructions, 30 of them its element's
# index, tests and 64-bit addresses; the mean's some 34); CALIBRATE on a GPU.
STAGED_RUN = 20
# ... where the run is a reduction's beside the product (not an operand: nothing stored, no
# rounding), its test and branch only: 8 and 3 in rmsnorm_linear's two runs a chunk (sm_90,
# static; its LDG, HADD2.F32, FFMA and the count's FADD are the loads' and ops' own)
STAGED_REDUCE_RUN = 6
STAGED_LOAD = 3
STAGED_VALUE = 1
# ... a mean or a variance there counts its elements (codegen/rowstats.py: FADD per element);
# a mean's loop share (INSTRUCTIONS' other, a CUDA-core lane loop's index) is not issued: the
# run is unrolled (rmsnorm_linear: static SASS/model 0.80 at the default sizes before)
STAGED_COUNT = 1


def compute(model, choice, sizes: dict, target: Target, level1: dict, H: list, units: list,
            warps_per_block, lane_share, fraction, symbolic: bool = False, cut=None,
            span=None, loads=None, wide=False, reads=(), extents=None) -> dict:
    """Seconds each compute limit takes: `issue` (every warp instruction), `tensor`, `fp32`,
    `mufu` (their pipes). `H`: bytes into each level below the top, `units`: units of each,
    `warps_per_block`: warps a block runs, `lane_share`: the share of their lanes with work,
    `fraction`: the share of chunks computed (masked chunks skipped), `cut`: the share the
    mask cuts (computed, not held everywhere: attention evaluates its mask there only),
    `wide`: the kernel indexes in 64 bits (index_width.wide, per candidate), `reads`: (load,
    bytes the register level moves of it) for each load (issue_simt.reads), `extents`: each
    op's (points, redo) (flops.work_extents; computed when not given)."""
    tensor = bool(choice.warps)
    # fragments padded past the arrays compute all the same: work counted per point scales
    # by the padded tiles and chunks, the blocks (fractional in `units`) by whole tiles; the
    # chunks are counted whole already (chunk_count); a CUDA-core kernel's blocks by whole
    # block tiles (its per-block terms: tiled_work.blocks_padding)
    per_point = padding(choice, sizes) if tensor else 1.0
    whole = padding(choice, sizes, stream=False) if tensor else blocks_padding(choice, sizes)
    units = [units[0] * whole] + list(units[1:])
    # a chain of products on tensor cores (codegen/chain.py: the backward's dQ and dK/dV)
    flash = tensor and flash_state(model)     # FlashAttention-2, or its state alone
    chain = tensor and not flash and not model.products and \
        sum(w.engine == "contraction" for w in model.work) >= 2   # (duals.py: no chain)
    stream = choice.stream[0] if choice.stream else None
    fp32, mufu, other, tensor_flops = [], [], [], []
    index_axes = {a for a, _ in choice.warps} | ({stream} if stream else set())
    positional = masked = False
    wide_at = None          # the scores whose positions are 64-bit integers (FLASH_INDEX_WIDE)
    paired = {n for n, _ in model.streaming.pairs}
    running = dict(model.shared)       # (score_states.py: one running state, the first's)
    if extents is None:
        extents = work_extents(model, level1, choice, sizes)
    for w, (points, redo) in zip(model.work, extents):
        amount = points * redo * w.times * per_point
        if stream in w.axes:
            amount = amount * fraction
        if tensor and w.engine == "contraction":     # (over a head padded: headpad.py)
            tensor_flops.append(amount * w.flops_per_point * ratio(model.padded, w.node, sizes))
            continue
        if not tensor:      # a split's lanes summing a product's terms at each key
            summed = issue_pair.merges(model, choice, sizes, w, amount)
            fp32.append(summed[0])
            other.append(summed[1])
        per = INSTRUCTIONS.get(w.op, DEFAULT)
        if tensor and w.op in ("mean", "var"):
            per = (per[0] + STAGED_COUNT, per[1], 0 if w.op == "mean" else per[2])
        # statistics of scores alone (Model.alone): the first is the online softmax's update
        # per score (as attention's softmax, FLASH_SCORE), the others its state
        state = flash and model.alone is not None and w.node == model.lse[0]
        if tensor and not state and (w.node in model.folded or w.node in model.lse_ops) or \
                running.get(w.node, w.node) != w.node:
            continue        # folded into the exponent's FFMA; the softmax's own state;
                            # another statistic's running state (score_states.py)
        if chain and w.op == "exp":     # a chain's operand takes exp as ex2.approx (cexpr.FAST)
            per = CHAIN_EXP
        if flash and cut is not None and key_only(model, choice, w):
            if not masked:     # the mask of the key alone: per key a lane holds (issue_mask)
                pairs = np.where(wide, FLASH_INDEX_WIDE[2], 0.0)
                other.append(units[0] * warps_per_block * chunk_count(model, choice, sizes) *
                             cut * WARP * per_key_chunk(model, choice, pairs))
                masked = True
            continue
        if flash and (w.op == "softmax" or state):
            per = FLASH_SCORE
        elif not tensor and w.node in paired and issue_pair.paired(model, choice):
            per = issue_pair.softmax(model, choice, sizes, w, fold.keys(model, choice), per)
        elif not tensor and w.op == "softmax" and w.node not in paired:
            stats = STREAMED_STATS if stream in w.axes or w.node in model.online else per
            per = tuple(x + y for x, y in zip(stats, SOFTMAX_NORMALISED))
        elif not tensor and (w.op == "logsumexp" or w.node in running) and \
                (stream in w.axes or w.node in model.online):
            per = STREAMED_STATS    # the online update (codegen/accum.py, Model.online; a
                                    # statistic of P keeps one: score_states.py)
        elif not tensor and w.op == "var" and (stream in w.axes or w.node in model.online):
            per = STREAMED_VAR      # Welford's update (codegen/accum.py)
        elif not tensor and w.op in SIMT_REDUCE:
            per = (0, 0, 0) if w.summand == "mul" and w.op != "var" else SIMT_REDUCE[w.op]
        elif flash and w.axes and set(w.axes) <= index_axes:
            # an op of positions only, on the score fragments (a folded bias's: its I2F)
            per = FLASH_BIAS_INDEX if w.node in model.bias_positions else FLASH_INDEX
            cuts = cut is not None and stream in w.axes and w.node in model.mask_nodes
            if not positional:         # their 64-bit indices, once per score (see above):
                # a mask's in the chunks it cuts, an op in every chunk (ALiBi's) in every one
                wide_at = (points * redo * w.times * per_point * cut) if cuts else amount
                if not cuts:
                    positional = True
            if cut is not None and stream in w.axes and w.node in model.mask_nodes:
                # the mask, where it cuts the chunk: its ops share the scores' positions
                amount = points * redo * w.times * per_point * cut
                if not masked:
                    other.append(amount * (MASK_POSITIONS + mask_ops(model.mask, stream)))
                    masked = True
                continue
        if not tensor:      # every lane of a split of an axis the op lacks runs it
            amount = amount * issue_pair.replicated(model, choice, w)
        fp32.append(amount * per[0])
        mufu.append(amount * per[1])
        other.append(amount * per[2])
    if wide_at is not None:
        other.append(wide_at * np.where(wide, FLASH_INDEX_WIDE[2], 0.0))
    chunks = chunk_count(model, choice, sizes)
    if flash:      # per chunk computed: rescale O (none alone), rows' exps
        rows, width = _flash_block(model, choice, sizes)
        per_block = units[0] * chunks * fraction
        fp32.append(per_block * rows * width * FLASH_RESCALE)
        mufu.append(per_block * rows * WARP * FLASH_ROW_EXPS)
    lanes = total(fp32) + total(mufu) + total(other)
    hmma = total(tensor_flops) / HMMA_FLOPS
    if tensor:
        # every chunk runs the loop's iteration, a chunk the mask does not hide also copies
        # each streamed tile; the loads a block keeps are copied once, before the loop
        threads = warps_per_block * WARP
        per_chunk, once, lsu = 0, 0, 0
        gathered = 0            # copies a thread makes per round of the gathered tiles
        chunk = dict([choice.stream]) if choice.stream else {}
        kept = [(a, t) for a, t in (loads if loads is not None else tiles(model, choice, level1))
                if a.node not in model.direct and a.node not in model.positions]
        # (read where an operand, a statistic or a row is computed: not copied)
        joined = not flash and not chain
        for a, copy, issued, rounds in tensor_copies(
                model, kept, chunk, level1, sizes, threads, _tensor_dtype(model) != "f32",
                joined):
            if a.node in model.gathered:        # the positions, once a round for all of them
                gathered = NUMBERS.maximum(gathered, rounds)
            if a.streamed:
                per_chunk = per_chunk + copy
                lsu = lsu + issued * chunks * fraction
            else:
                once = once + copy
                lsu = lsu + issued
        per_chunk = per_chunk + gathered * COPY_GATHERED + staged(model, choice, level1, threads)
        visited = chunks * (span[0] if span else 1)
        copies = units[0] * warps_per_block * (visited * ITERATION_TENSOR + chunks * fraction *
                                               per_chunk + once) + \
            (stores(model, sizes) + packing.unpacking(model, sizes, wide)) * whole
        # the LSU's warp instructions: the copies' (LDGSTS, or LDG and STS a value) and the
        # fragments' LDSM (FlashAttention: K's and V's B fragments, half an LDSM per HMMA)
        lsu = units[0] * warps_per_block * lsu + (
            hmma / 2 if flash else 0 if choice.instruction == "wgmma"
            else (H[1] if len(H) > 1 else 0) / LDSM_BYTES * per_point)
        if flash:     # the fitted loop of FlashAttention-2 (computed chunks)
            warp_instr = hmma * (1 + FLASH_PER_HMMA) + lanes / WARP + copies
            if choice.reread is not False:      # Q's fragments loaded again every chunk
                rows, _ = _flash_block(model, choice, sizes)
                warp_instr = warp_instr + NUMBERS.where(choice.reread, FLASH_REREAD, 0.0) * (
                    units[0] * chunks * fraction * rows / 16 *
                    occupancy.query_slices(model, choice, sizes))
            dependent = lanes / WARP
        elif choice.instruction == "wgmma":     # HGMMA and descriptors, no LDSM (wgmma.py)
            warp_instr = wgmma.warp_instructions(hmma, choice) + lanes / WARP + copies
            dependent = 0
        else:
            ldsm = (H[1] if len(H) > 1 else 0) / LDSM_BYTES * per_point
            warp_instr = hmma + ldsm + lanes / (WARP * lane_share) + copies + \
                added.issue(model, choice, sizes, level1, units[0] * chunks * fraction)
            dependent = lanes / (WARP * lane_share) if chain else 0
    else:
        if stream is not None:
            chunks = chunks * fraction      # a CUDA-core block skips a hidden chunk whole
        more, warp = issue_simt.warp_instructions(
            model, choice, sizes, level1, warps_per_block * WARP, chunks, 1.0, H, units,
            wide, reads)
        warp_instr = (lanes + more) / (WARP * lane_share) + warp
    if span is not None:            # the prologue of a loop bounded by data, per block
        threads = warps_per_block * WARP
        warp_instr = warp_instr + units[0] * warps_per_block * (
            NUMBERS.ceil(span[1] / threads) * SPAN_POSITION + span[2] * SPAN_REDUCE)
    rate = target.rate(wgmma.rate_key(choice, _tensor_dtype(model))) if tensor else None
    out = {"tensor": total(tensor_flops) / rate if rate else 0,
           "issue": _per(target, "schedulers", warp_instr),
           "fp32": _per(target, "fp32_lanes", total(fp32)),
           "mufu": _per(target, "mufu_lanes", total(mufu))}
    if tensor and target.per_second("lsu_lanes"):     # a pipe of its own
        out["lsu"] = _per(target, "lsu_lanes", lsu * WARP)
    if flash or chain:
        # what waits on the products within a warp (the softmax, a chain's elementwise
        # operands): never more than the issue slots, so no limit of its own (waits.serial)
        out["dependent"] = _per(target, "schedulers", dependent)
    return out


def stores(model, sizes: dict):
    """Warp instructions of a tensor-core kernel's epilogue stores: STORE_ELEMENT per element
    of each output, 32 lanes a warp (fragments padded past the arrays: padding)."""
    return sum(prod(sizes[a] for a in arr.axes) for arr in model.arrays
               if arr.role == "store" and arr.node not in model.across) * STORE_ELEMENT / WARP


def staged(model, choice, level1: dict, threads):
    """Warp instructions per warp and chunk of what a product computes as it stages
    (Model.staged: an operand computed from loads, rounded and stored; a reduction beside
    the product)."""
    chunk = dict([choice.stream]) if choice.stream else {}
    out = 0
    for _, axes, width, reads, operand in model.staged:
        runs = NUMBERS.ceil(prod(chunk.get(a, level1[a]) for a in axes) / (threads * width))
        rounding = max(width // 2, 1) if operand else 0     # F2FP packs two values
        run = STAGED_RUN if operand else STAGED_REDUCE_RUN
        out = out + runs * (run + reads * (STAGED_LOAD + width * STAGED_VALUE) + rounding)
    return out


def _flash_block(model, choice, sizes: dict):
    """(rows, O's width) of a FlashAttention-2 block: the row axis's tile, and the extent of
    the output accumulator along its other axes (the batch axes hold one position, O's
    columns the block's tile of them: flash.COLUMNS; 0 for statistics alone: no O)."""
    (row,) = [a for a, _ in choice.warps]
    return dict(choice.group)[row], occupancy.output_width(model, choice, sizes)


def _per(target: Target, name: str, amount):
    rate = target.per_second(name)
    return amount / rate if rate else 0


def _tensor_dtype(model) -> str:
    """The 16-bit dtype a tensor-core kernel's products run in: the site's operands' (the
    lowering packs attention's probabilities P to it for P V)."""
    found = [w.dtype for w in model.work if w.engine == "contraction"
             and w.dtype in ("f16", "bf16")]
    return found[0] if found else "f32"


def simt_only(target: Target) -> bool:
    """Whether the target has no issue table (the paper's model: compute by FLOP rates)."""
    return not target.per_clock
