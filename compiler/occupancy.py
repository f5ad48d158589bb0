"""Occupancy: registers per thread, blocks per SM, and the fraction of the GPU a launch keeps busy.

Registers per thread are estimated per engine as `base + slope * values`, fitted to what
ptxas reports for napkin's own kernels (NVRTC, sm_90, `runtime/ptxas.py`; the fit and its
data are in `benchmarks/model_check.py --registers`):

- CUDA cores: `values` = the register level's footprint in 4-byte words (the model's M).
  ptxas: 42 at 1 word, 48-54 at 3, 58 at 5, 71 at 9, 146-166 at 76.
- a tensor-core product: `values` = a warp tile's fragment registers per lane
  (accumulators `tm tn / 32`, A `tm / 4`, B `tn / 4`); ptxas: 124 at 48, 150-168 at 88.
  An epilogue op that needs registers of its own adds them (EPILOGUE_REGISTERS: erf).
- a chain of products: `values` = chain.registers (score tiles, accumulators, one packed
  A fragment); ptxas compresses near 255, so the estimate is the lower of the FlashAttention
  line and CHAIN_HIGH, plus the chunk's mask ops and width (below);
  ptxas: 100-126 at 44-52 (16-key chunks), 153-242 at 68, 189-225 at 100, 239-242 at 148.
- FlashAttention-2: `values` = flash.registers (S, O, Q fragments per lane; Q's a slice
  or two when re-read from shared memory every chunk);
  ptxas: 170 at 80, 186 at 104, 210-244 at 112, 238-255 at 128; ptxas compresses near 255
  (Q re-read, one fragment a warp: 236 at 104, 250 at 120, 244-254 at 144, 250-254 at 152),
  so the estimate is the lower of that line and ATTENTION_HIGH, plus the scores' mask ops,
  plus Q's held slices beyond 4 beside 64 scores a lane (HELD_SLICE_REGISTERS: d = 72).

A plan fits the register level when its estimate is at most what a thread may have
(255, and the register file over the block's threads); on the SM, registers are allocated
in units of 8 per thread (256 per warp), and the blocks an SM holds are the fewest that
registers, shared memory and thread slots allow.
"""

from __future__ import annotations

import numpy as np

from .choices import NUMBERS, prod
from .headpad import fragments
from .model import flash_state
from .target import Target

WARP = 32
REREAD_SLICES = 2       # Q's 16-wide slices live when re-read each chunk (flash.REREAD_SLICES)
# engine -> (base, slope) of the register estimate (the module docstring)
REGISTERS = {"cuda cores": (45.0, 1.5), "product": (80.0, 0.9), "attention": (40.0, 1.65),
             "chain": (40.0, 1.65)}
# A chain's estimate (chain.py): min(40 + 1.65 v, 120 + 0.70 v) + 4 per elementwise op of the
# chunk beyond 7 (a mask's comparisons, selects and positions: causal's gradient has 10-11,
# the plain one 6-7) + 0.75 per key of a chunk beyond 16 (its staging addresses). Fitted to
# ptxas (NVRTC, sm_90) on 72 unspilled chain kernels of the attention gradients (plain,
# saved, causal, GQA; d 64 and 128; chunks 16-64; 4 and 8 warps; `benchmarks/chain_registers.py`
# reruns it): rms 23 registers (ptxas varies by 60 at one fragment count), bias -5;
# the line alone: rms 34. d = 128's dK and dV in one kernel (148 values, 16-key chunks) is
# 224 by the estimate, 239-242 by ptxas; causal, 240 against 255 and 224 bytes of spills.
CHAIN_HIGH = (120.0, 0.70)
# FlashAttention-2's high line (the module docstring; heads of 192 and 256, flash.py's budget
# data): it meets the line at 123 fragment registers, below which nothing changes
ATTENTION_HIGH = (200.0, 0.35)
CHAIN_OPS = 7
CHAIN_OP_REGISTERS = 4.0
CHAIN_CHUNK_REGISTERS = 0.75
ALLOCATION = 8          # registers per thread are allocated in units of 8 (256 per warp)
MAX_BLOCKS = 32         # resident blocks per SM (CC 8.0 and 9.0)
THREAD_SLOTS = 2048     # resident threads per SM
LATENCY_THREADS = 256   # active threads per SM that hide memory latency
# A cp.async pipeline (the tensor-core kernels) hides latency by the bytes it keeps in
# flight, not by its threads: the next chunk's tiles are copied while this one is computed.
# Little's law: an SM needs its share of the HBM bandwidth times the latency in flight. The
# latency is an assumption of the order microbenchmarks report for HBM on A100/H100 (several
# hundred ns), not a measured figure: CALIBRATE on a GPU (benchmarks/gpu_check.py).
LATENCY_SECONDS = 700e-9
# ... and an L2 hit's latency, of the order Luo et al. (arXiv:2402.13499, 2024) measure on
# H100 (some 260 cycles near, more far): an assumption, CALIBRATE on a GPU.
L2_LATENCY_SECONDS = 300e-9
MAX_STAGES = 4            # the deepest cp.async pipeline a tensor-core kernel is given
LIMITS = ("registers", "shared memory", "threads", "blocks")
# a tensor-core product's epilogue op that holds registers of its own while the fragments
# are live: erff's polynomial and its range tests (ptxas, sm_80 and sm_90: gelu_erf at 64x64
# warp tiles uses 255 and spills 20-40 bytes where matmul at the same tiles uses 234)
EPILOGUE_REGISTERS = {"erf": 32.0}
# ... on wgmma (compiler/wgmma.py): ptxas (NVRTC 13.5, sm_90a) gives gelu_erf's 64 x 256
# warpgroup tile 255 registers and 8 bytes of spills where matmul's uses 199 (the estimate)
WGMMA_EPILOGUE_REGISTERS = {"erf": 64.0}


def engine_of(model, choice) -> str:
    if not choice.warps:
        return "cuda cores"
    if flash_state(model):       # (statistics of scores alone: the kernel without P V)
        return "attention"
    # a product's warps tile its rows and columns; a chain's (chain.py) stack along the rows
    return "product" if len(choice.warps) > 1 else "chain"


def output_width(model, choice, sizes: dict):
    """O's columns a FlashAttention-2 warp holds (padded to whole 8-wide fragments): the
    extent of its output accumulator along its axes other than the rows (the batch axes hold
    one position, O's columns the block's tile of them: flash.COLUMNS); 0 for row
    statistics of scores alone (Model.alone: no O)."""
    (row,) = [a for a, _ in choice.warps]
    thread = dict(choice.thread)
    acc = next((a for a in model.arrays if a.role == "accumulator" and a.slots == 1
                and model.alone is None), None)
    return 0 if acc is None else \
        fragments(prod(thread.get(a, sizes[a]) for a in acc.axes if a != row)) * 8


def query_array(model, row: str):
    """FlashAttention-2's Q: the load the key loop does not touch over the fragment rows
    (of those, the one with most axes: a row vector such as varlen's doc[q] is another)."""
    return max((a for a in model.arrays if a.invariant and row in a.axes),
               key=lambda a: len(a.axes))


def query_slices(model, choice, sizes: dict):
    """16-wide slices of the head in Q's fragments (its axes beyond the warp's rows)."""
    thread = dict(choice.thread)
    (row,) = [a for a, _ in choice.warps]
    return NUMBERS.ceil(prod(sizes[a] for a in query_array(model, row).axes
                             if a not in thread) / 16)       # (a head padded: headpad.py)


def fragment_values(model, choice, sizes: dict):
    """A tensor-core warp's fragment registers per lane (per candidate)."""
    thread = dict(choice.thread)
    warped = [a for a, _ in choice.warps]
    if flash_state(model):          # FlashAttention-2: S, O and Q fragments (flash.registers)
        (row,) = warped
        tm = thread[row]
        chunk = choice.stream[1]
        width = output_width(model, choice, sizes)
        # Q re-read from shared memory each chunk: a few 16-wide slices live (flash.REREAD_SLICES)
        head = query_slices(model, choice, sizes)
        slices = NUMBERS.where(choice.reread, np.minimum(REREAD_SLICES, head), head)
        return tm / 16 * (chunk / 8 * 4 + width / 8 * 4 + slices * 4)
    if len(warped) == 1 and choice.stream:    # a chain: chain.registers
        (row,) = warped
        outs = {n for n, _ in model.streaming.reducers} | model.across
        scores = sum(1 for w in model.work if w.engine == "contraction" and w.node not in outs)
        widths = sum(fragments(prod(sizes[a] for a in acc.axes if a not in thread)) * 8
                     for acc in model.arrays if acc.role == "accumulator")
        return thread[row] / 16 * (scores * choice.stream[1] / 8 * 4 + widths / 8 * 4) + 4
    tm, tn = (thread[a] for a in warped[:2]) if len(warped) > 1 else (thread[warped[0]], 8)
    if choice.instruction == "wgmma":
        # a warpgroup's 64 x N accumulators over its 128 threads; no operand fragments (the
        # descriptors read shared memory), two 64-bit descriptors; and the epilogue's vectors
        # over the columns (a bias[o]): a lane holds N / 4 columns, a register each
        return tm * tn / (4 * WARP) + 4 + _column_vectors(model, choice, warped) * thread[
            _columns(model, warped)] / 4
    if model.products:      # products with accumulators of their own (duals.py): A's
        products, a, b = model.products    # fragments over the rows, B's over the columns
        col = _columns(model, warped)
        rows, cols = (thread[x] for x in (next(x for x in warped[:2] if x != col), col))
        return products * rows * cols / WARP + a * rows / 4 + b * cols / 4
    return tm * tn / WARP + tm / 4 + tn / 4


def _columns(model, warped) -> str:
    """A product's column axis: of its two fragment axes, the later in what it stores (the
    contiguous one: tensorcore._product's rule)."""
    stored = next((a.axes for a in model.arrays if a.role == "store" and set(warped[:2]) <=
                   set(a.axes)), tuple(warped))
    return max(warped[:2], key=stored.index)


def _column_vectors(model, choice, warped) -> int:
    """Loads over the product's columns but not its rows nor the streamed axis: vectors the
    epilogue reads at each column (a bias)."""
    col = _columns(model, warped)
    row = next(a for a in warped[:2] if a != col)
    stream = choice.stream[0] if choice.stream else None
    return sum(1 for a in model.arrays if a.role == "load" and col in a.axes
               and row not in a.axes and stream not in a.axes)


# FlashAttention-2: registers per score a lane holds, per elementwise op of the scores beyond
# the first (masks, biases, caps live per score while the chunk's row maxima are taken). ptxas
# at 64 scores per lane (sm_90): scale only 194, causal (+2 ops) 255, alibi (+5) 255 with
# spills, softcap (+3) 255
SCORE_OP_REGISTERS = 0.2
# FlashAttention-2 with Q held: ptxas fits Q's fragments of 64 of the head (4 slices of 16)
# beside 64 scores a lane (one 16-row fragment and 128-key chunks, or two and 64), not a
# fifth slice: d = 72 (padded to 80) at 128 keys held 255 registers and spilled 232 bytes,
# where the line said 238. Registers per held slice beyond HELD_SLICES, per 32 scores a
# lane beyond 32 (none at 64-key chunks of one fragment: there ptxas's counts rise some 10
# a slice, within the fit's spread, and compress near 255, d = 128's 232). Fitted to ptxas
# (NVRTC 13, sm_90) on 245 kernels of attention, dk and dv each of 40, 56, 64, 72, 80, 96,
# 104 (8-column fragments odd and even; dk padded to 16), tilings of 1 fragment a warp and
# 64 or 128 keys (4 and 8 warps), of 2 and 32 or 64 (`benchmarks/flash_registers.py
# --padded` reruns it): of the 86 that spill, the line alone let 43 fit; with this term none
# (28 that do not spill are rejected, 12 before); over those that fit, rms 15 registers.
HELD_SLICES = 4
HELD_SLICE_REGISTERS = 44.0


def score_ops(model, choice) -> int:
    """Elementwise ops per score beyond the first, on the streamed axis (attention); the
    row statistics that are the softmax's own state (row_state.py) no op per score."""
    return ops_along(model, choice.stream[0] if choice.stream else None)


def ops_along(model, stream: str | None) -> int:
    """score_ops with the streamed axis `stream`."""
    ops = [w for w in model.work if stream in w.axes and w.engine != "contraction"
           and w.op not in ("softmax",) and w.node not in model.lse_ops]
    return max(0, len(ops) - 1)


# CUDA cores, a softmax paired with a contraction (online softmax, rescaling every
# accumulator per chunk): registers per word of the register level beyond the fit's slope.
# ptxas (sm_90): varlen_attention's paired kernel at 92 words held 255 and spilled 204 bytes
# where the plain fit says 183
PAIRED_SLOPE = 1.0


def held_head(model, choice, sizes: dict):
    """FlashAttention-2's registers for Q's held slices beyond HELD_SLICES beside more than
    32 scores a lane (HELD_SLICE_REGISTERS; per candidate; 0 with Q re-read)."""
    (row,) = [a for a, _ in choice.warps]
    scores = dict(choice.thread)[row] * np.asarray(choice.stream[1], dtype=float) / WARP
    beyond = np.maximum(query_slices(model, choice, sizes) - HELD_SLICES, 0)
    extra = HELD_SLICE_REGISTERS * beyond * np.maximum(scores / 32 - 1, 0)
    return NUMBERS.where(choice.reread, 0.0, extra)


def _extra(model, choice, engine: str, level_M=0.0, sizes=None):
    if engine == "cuda cores":
        return PAIRED_SLOPE * level_M / 4 if model.streaming.pairs else 0.0
    if engine == "product":
        table = WGMMA_EPILOGUE_REGISTERS if choice.instruction == "wgmma" else EPILOGUE_REGISTERS
        return sum(table.get(w.op, 0.0) for w in model.work if w.engine != "contraction")
    (row,) = [a for a, _ in choice.warps]
    scores = dict(choice.thread)[row] * choice.stream[1] / WARP
    held = held_head(model, choice, sizes) if engine == "attention" and sizes else 0.0
    return SCORE_OP_REGISTERS * score_ops(model, choice) * scores + held


def registers(model, choice, sizes: dict, level_M):
    """Estimated registers per thread (per candidate): `level_M` is the register level's M
    (bytes per thread; per warp with tensor cores)."""
    engine = engine_of(model, choice)
    values = level_M / 4 if engine == "cuda cores" else fragment_values(model, choice, sizes)
    return _estimate(model, choice, engine, values, level_M, sizes)


def _estimate(model, choice, engine: str, values, level_M=0.0, sizes=None):
    """Registers per thread from the engine's values (the module docstring)."""
    base, slope = REGISTERS[engine]
    if engine == "chain":
        high, steep = CHAIN_HIGH
        return (np.minimum(base + slope * values, high + steep * values)
                + CHAIN_OP_REGISTERS * max(score_ops(model, choice) - CHAIN_OPS, 0)
                + CHAIN_CHUNK_REGISTERS * (np.asarray(choice.stream[1], dtype=float) - 16))
    line = base + slope * values
    if engine == "attention":
        line = np.minimum(line, ATTENTION_HIGH[0] + ATTENTION_HIGH[1] * values)
    return line + _extra(model, choice, engine, level_M, sizes)


def register_limit(target: Target, threads):
    """Registers a thread may have when a block has `threads` threads."""
    per_thread = target.registers_per_processor / np.maximum(threads, 1)
    return np.minimum(target.max_registers_per_thread, per_thread)


def register_capacity(target: Target, model, choice, sizes: dict, level_M, threads):
    """The register level's capacity as the footprint (bytes per unit, like M) the registers
    allow: M fits it exactly when the estimate is within the limit."""
    engine = engine_of(model, choice)
    base, slope = REGISTERS[engine]
    limit = register_limit(target, threads)
    if engine == "cuda cores":
        paired = PAIRED_SLOPE if model.streaming.pairs else 0.0
        return np.maximum(limit - base, 0) / (slope + paired) * 4
    est = _estimate(model, choice, engine, fragment_values(model, choice, sizes), sizes=sizes)
    return level_M * limit / est


def blocks_per_sm(target: Target, smem, threads, regs):
    """(blocks an SM holds, the index into LIMITS of what limits them), per candidate."""
    cap = target.levels[1].capacity_bytes
    by_smem = np.floor(cap / np.maximum(smem, 1))
    by_threads = np.floor(THREAD_SLOTS / np.maximum(threads, 1))
    if regs is None or not target.registers_per_processor:
        by_regs = np.full(np.shape(by_smem), np.inf)
    else:
        per_warp = np.ceil(np.maximum(regs, 1) / ALLOCATION) * ALLOCATION * WARP
        warps = np.ceil(np.maximum(threads, 1) / WARP)
        by_regs = np.floor(np.floor(target.registers_per_processor / per_warp) / warps)
    # the first of the fewest, in LIMITS order (np.argmin over the four, without stacking
    # them at the candidates' shape; a NaN would be argmin's pick: the slow path keeps that)
    fewest, which = by_regs, np.zeros(np.shape(by_regs), dtype=np.intp)
    for i, by in enumerate((by_smem, by_threads, float(MAX_BLOCKS)), start=1):
        fewer = by < fewest
        fewest, which = np.where(fewer, by, fewest), np.where(fewer, i, which)
    if np.isnan(fewest).any():
        options = np.stack(np.broadcast_arrays(by_regs, by_smem, by_threads,
                                               np.full(np.shape(by_smem), float(MAX_BLOCKS))))
        return np.maximum(np.min(options, axis=0), 1), np.argmin(options, axis=0)
    return np.maximum(fewest, 1)[()], which[()]


def in_flight(choice, loads, summed: int = 1):
    """Bytes a tensor-core block keeps in flight: one chunk of each tile it streams into
    shared memory (None for the CUDA cores, whose loads are not pipelined). `loads`: the
    kernel's tiles (issue.tiles); `summed`: the pairs of a sum of products (Model.summed),
    whose pipelines run one at a time, their tiles of one size."""
    if not choice.warps or not choice.stream:
        return None
    return sum(tile for a, tile in loads if a.streamed) / summed


def needed_in_flight(target: Target):
    """(bytes an SM keeps in flight to stream from HBM at its share of the bandwidth, the
    same from L2): Little's law, each level's latency times its bandwidth per SM."""
    hbm = target.levels[1].bandwidth if len(target.levels) > 1 else 0
    procs = target.processors or 1
    return hbm / procs * LATENCY_SECONDS, target.l2_bandwidth / procs * L2_LATENCY_SECONDS


def stages(target: Target, flight, per_stage, held, capacity):
    """A tensor-core kernel's pipeline depth (per candidate): the fewest stages, 2 to
    MAX_STAGES, whose chunks in flight ((stages - 1) x `flight`, one chunk of every streamed
    tile) cover what one block needs in flight (needed_in_flight), as deep as fits the
    shared memory: `held` bytes with two stages, `per_stage` more for each further one."""
    need = max(needed_in_flight(target))
    want = np.where(np.asarray(flight) > 0,
                    np.clip(1 + np.ceil(need / np.maximum(flight, 1.0)), 2, MAX_STAGES), 2)
    out = np.full(np.broadcast_shapes(np.shape(want), np.shape(held), np.shape(per_stage)), 2.0)
    for k in range(3, MAX_STAGES + 1):
        out = np.where((want >= k) & (held + (k - 2) * per_stage <= capacity), k, out)
    return out


def latency_cover(target: Target, resident, flight):
    """(HBM, L2): the share of each level's bandwidth the SM's resident blocks can draw with
    `flight` bytes each in flight (Little's law), at most 1."""
    hbm, l2 = needed_in_flight(target)
    have = resident * flight
    # (nothing streamed in, or no block: nothing to hide)
    return (np.where(have > 0, np.minimum(1.0, have / max(hbm, 1e-30)), 1.0) if hbm else 1.0,
            np.where(have > 0, np.minimum(1.0, have / max(l2, 1e-30)), 1.0) if l2 else 1.0)


def busy_share(target: Target, blocks, per_sm):
    """The share of the SMs' block slots a launch of `blocks` keeps busy: blocks / processors
    when some SMs idle, 1 when one wave holds them all, else the last wave's share: blocks /
    (waves * the slots a wave fills)."""
    procs = target.processors
    slots = procs * per_sm
    waves = np.ceil(blocks / slots)
    return blocks / (waves * np.minimum(slots, np.maximum(blocks, procs)))


def utilization(target: Target, blocks, smem, threads, active=None, regs=None, per_sm=None,
                flight=None):
    """Fraction of the machine a launch keeps busy: idle SMs, the last partial wave, and
    too little memory parallelism per SM to hide latency: fewer than 256 active threads
    (a pipelined tensor-core kernel, `flight` given: none; its bytes in flight bound its
    memory terms instead, latency_cover). `threads`: per block as launched (what the SM's thread slots
    and registers hold), `active`: those with work, `regs`: registers per thread (None: not
    counted)."""
    if not target.processors:
        return 1.0
    active = threads if active is None else active
    if per_sm is None:      # (`per_sm`: blocks_per_sm's count when the caller has it)
        per_sm, _ = blocks_per_sm(target, smem, threads, regs)
    procs = target.processors
    busy = busy_share(target, blocks, per_sm)
    resident = np.minimum(per_sm, np.ceil(blocks / procs))
    occupancy = np.minimum(1.0, resident * active / LATENCY_THREADS)
    if flight is not None:
        # a cp.async pipeline hides latency by its bytes in flight, not by its threads: what
        # they draw of each level's bandwidth is the memory terms' (latency_cover)
        occupancy = 1.0
    return np.maximum(busy * occupancy, 1e-6)
