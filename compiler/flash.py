"""Attention on tensor cores: which fused kernels run FlashAttention-2 on mma.sync, and tiles.

A kernel qualifies when it streams `x` through one online softmax paired with its
contraction (the fused attention the planner derives):

    S[batch.. row x] = f(sum over dk of Q[.. row dk] * K[.. x dk])   f elementwise
    P = softmax[x](S)
    O[batch.. row dv] = g(sum over x of P * V[.. x dv])               g elementwise

with Q, K, V loads of one 16-bit dtype (or views that only rename a load: `K[h s d]` of
K[h t d], FlashSite.renamed; an f32 intermediate among them is rounded to the others' dtype
as it is staged, `operand_reads.entered`), `dk` and `dv` static (any size: tiles padded to multiples of
16 and 8 with zeros, headpad.py), and no other reduction or store in the kernel but sums
over `dv` of O's elementwise functions after the stream, only stored (the backward's
`D = sum[d](dO * O)`: the epilogue adds them per row, `FlashSite.epilogue`). `f` holds the
scale and masks (from axis indices or loaded arrays), `g` the cast and any epilogue.

The block takes `BM` rows (one position of each batch axis) and, in a split's partial
kernel, a tile of O's columns (COLUMNS: each block along them computes the scores again);
each of its `wm` warps owns `BM / wm` rows as `16`-row fragments: their Q fragments stay
in registers (or, a choice of the search, are re-read from shared memory every chunk:
REREADS), the scores of a chunk of `BC` keys come out of the tensor cores as C fragments,
the online softmax runs on them (row statistics across the 4 lanes of a quad), and the
probabilities, packed to 16 bits, are the A fragments of `P V`. For the cost model the register level's
unit is the warp (cost.py), as for a plain product.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import headpad, ir, occupancy, packing, row_state, rowsource, split, warps
from .canonical import through
from .choices import NUMBERS
from .cost import Choice, Choices, Cost, evaluate
from .model import Model
from .operand_reads import one_dtype, renames
from .rowsource import RowSource
from .specialise import fix
from .target import Target

ROWS = (16, 32, 64, 128, 256)        # block rows
FRAG_ROWS = 16                       # rows of an mma.sync fragment
CHUNKS = (16, 32, 64, 128)           # keys per chunk
WARPS = (1, 2, 4, 8)
MAX_REGISTERS = 128                  # fragment registers per lane (S, O, Q): the rest of 255 is
                                     # addresses, copies and the softmax (ptxas: no spills)
# Q's A fragments held in registers for the whole key loop, or re-read from shared memory by
# ldmatrix every chunk (FlashAttention-2 does both: Is_Q_in_regs), a slice of 16 of the head
# at a time; REREAD_SLICES of them counted live (the next slice's load in flight)
REREADS = (False, True)
REREAD_SLICES = occupancy.REREAD_SLICES
# Re-reading Q is the uncalibrated form (its LDSM per slice and the occupancy it buys have
# never been timed): the search takes it where the model predicts it at least this much
# faster than the best tiling that holds Q (a head too wide to hold: 2.6x at d = 512), and
# FlashAttention-2's held Q within that margin (a100 attention d = 64 was 0.9% faster
# re-read by the model, at 1.25x Triton's non-MMA instructions per HMMA)
REREAD_MARGIN = 0.05
# ... and, re-read, a budget that weighs the chunk's score registers (fm x chunk / 2 a lane)
# REREAD_SCORE_WEIGHT times: each score also lives as its exponential and, packed, as the A
# fragment of P V beside V's B fragments, and a chunk's keys have their copies' addresses.
# ptxas (NVRTC 13, sm_90; fragment registers + 3 x the score registers -> registers):
#   not spilled: a head of 256 at one fragment a warp and 16- or 32-key chunks (144 + 24, 152 +
#   48: 244-254, causal too), 192 at 32 keys (120 + 48: 250), dk 192 dv 128 at 64 keys (104 +
#   96: 236), dk 512 dv 64 at two fragments and 16 keys (96 + 48: 222);
#   spilled: 256 at 64 keys (168 + 96: 255 and 16-28 bytes at 8 warps), 192 at 64 keys (136 +
#   96: 12 bytes), dk 512 dv 64 at two fragments and 32 keys (112 + 96: 44 bytes), dk 192 dv
#   128 at two fragments and 32 keys (176 + 96: 60-116 bytes)
# (`benchmarks/flash_registers.py` reruns it). Held Q keeps the plain count: d = 192 held at
# 16-key chunks (152 fragment registers) spills where re-read at 152 does not
REREAD_SCORE_WEIGHT = 4
REREAD_MAX_REGISTERS = 200
ELEMENTWISE = (ir.Map, ir.Assign, ir.Index, ir.Const, ir.SizeOf)
# (block rows, warps, keys per chunk) in search order: each warp one or two 16-row fragments
TILINGS = np.array([(bm, wm, chunk) for bm in ROWS for wm in WARPS for chunk in CHUNKS
                    if not bm % (16 * wm) and bm // (16 * wm) <= 2])
# O's columns a block takes in a split's partial kernel (FlashSite.lse): the whole value
# head, or one of these below it, the blocks along `dv` each computing the chunk's scores
# and softmax again (the model's redo, and K re-read by each: cost.py) and each writing the
# row's logsumexp, the same (codegen/flash.py). A value head wider than a lane's registers
# hold beside a split's state (MLA's 512, 256 at a split) splits this way (docs/splits.md).
COLUMNS = (32, 64, 128, 256)


@dataclass(frozen=True)
class FlashSite:
    scores: int             # S's contraction Q K
    soft: int               # the softmax over x
    out: int                # O's contraction P V
    q: int
    k: int
    v: int
    row: str                # Q's fragment axis (packed: `(r q)`, packing.name's)
    red: str                # the streamed axis x (K's and V's)
    dk: str                 # contracted by Q K
    dv: str                 # V's own axis: O's columns
    batch: tuple[str, ...]
    dtype: str
    head: int               # size of dk
    width: int              # size of dv
    lse: tuple[int, ...] = ()    # row statistics of the softmax's scores also stored, its
                                 # final state (row_state.py): logsumexp[x] (a split's partial
                                 # state: compiler/split.py), max[x], sum[x] of exp
    lse_kinds: tuple[str, ...] = ()    # ... the kind of each (row_state.KINDS)
    epilogue: tuple[int, ...] = ()   # sums over dv of O's elementwise functions, after the
                                     # stream (the backward's D = sum[d](dO * O)): per row
    rows: tuple[RowSource, ...] = ()     # K's and V's rows where read through a split's window
                                         # or a gather (a paged cache): compiler/rowsource.py
    packed: tuple[str, ...] = ()    # the Q axes the fragment rows flatten, outer to inner
                                    # (GQA's r x q: compiler/packing.py), () for one axis
    padded: tuple = ()      # heads padded in shared memory (headpad.py: head_tile, width_tile)
    renamed: tuple[tuple[int, int], ...] = ()   # (Q, K or V, the load it only relabels:
                                    # `K[h s d]` of K[h t d]), copied from its memory (tiles)

    @property
    def row_axes(self) -> tuple[str, ...]:
        """The diagram's axes the fragment rows run along (one, or the packed ones)."""
        return self.packed or (self.row,)



def examine(g, kernel, model: Model, target: Target, sizes: dict | None = None,
            packed: bool | None = None) -> FlashSite | str | None:
    """The kernel's attention on tensor cores, why not (a string), or None when the kernel
    is no attention (no online softmax); `packed`: its fragment rows packed or not where
    they can be (packing.fragment_rows; None: by default)."""
    st = model.streaming
    if len(st.pairs) != 1 or st.stats or st.passes != 1:
        return None
    soft, out = st.pairs[0]
    x = st.axis
    lse = model.lse
    if len(st.reducers) != 1 + len(lse):
        return None
    chunk = set(st.per_chunk[0])
    if any(n in chunk for n in kernel.stores):
        return "the kernel stores a value of every chunk (P or S), not only O"
    loads = set(kernel.loads)
    contractions = [n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Contract)]
    scores = [n for n in contractions if n != out]
    # sums after the stream (none of the chunk's values): checked below as the epilogue
    after = tuple(n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Reduce) and n not in chunk
                  and n not in lse and ir.op(g, n).fn == "sum")
    others = [n for n in kernel.nodes if isinstance(ir.op(g, n), (ir.Reduce, ir.Softmax))
              and n != soft and n not in lse and n not in after]
    if not scores and not others:
        if set(kernel.loads) - set(g.graph["inputs"].values()):
            return "the scores are computed by another kernel and read here (S stored)"
        return "the scores sum nothing: they are no contraction of Q and K"
    if len(scores) != 1 or others:
        return "the scores are not one contraction (Q K) under elementwise operations"
    scores = scores[0]
    q, k, v = _operands(g, scores, out, soft, x)
    strange = []
    for n in kernel.nodes:
        if n in loads or n in (scores, soft, out) or n in lse or n in after or split.window(g, n):
            continue
        if isinstance(ir.op(g, n), ir.View) and ir.operands(g, n)[0] in loads:
            continue         # a loaded array read at renamed positions (doc[q] beside doc[x])
        if isinstance(ir.op(g, n), ir.Gather) and n not in (q, k, v) and \
                ir.operands(g, n)[0] in loads:
            continue         # ... or at computed ones, a term of the scores (T5's bias table
                             # B[h (clip(x - q) + 8)]), read by the scalar emitter per score
        if not isinstance(ir.op(g, n), ELEMENTWISE):
            strange.append(n)
    # K and V read through gathers (a paged cache) or a split's windows: their rows copied
    sources = _row_sources(g, kernel, q, k, v, scores, out, x, sizes, packed)
    if isinstance(sources, str):
        return sources
    covered = {m for src in sources.values() for m in rowsource.nodes(g, src)}
    left = [n for n in strange if n not in covered]
    gathered = [n for n in left if n in (k, v) and isinstance(ir.op(g, n), ir.Gather)]
    if gathered:        # (K or V gathered at positions along the scores' own axes)
        rows = gathered[0]
        extra = [a for a in ir.type_of(g, rows).axes
                 if a != x and a not in ir.type_of(g, ir.operands(g, rows)[0]).axes]
        return (f"K or V is gathered at positions that vary along "
                f"{', '.join(f'`{a}`' for a in extra) or 'the query rows'}: a chunk's tile of "
                "keys is copied once for all the block's rows")
    if left:
        return "a view or another operation sits between the products and the softmax"
    renamed = tuple((n, renames(g, n)) for n in dict.fromkeys((q, k, v))
                    if n not in loads and n not in sources and renames(g, n) in loads)
    read = {n for n in (q, k, v) if n in loads or n in sources} | {n for n, _ in renamed}
    if len(ir.op(g, scores).axes) != 1 or read != {q, k, v} or q in (k, v):
        return "Q, K and V must be loaded arrays (one contracted axis in Q K)"
    dtype = one_dtype(g, target, (q, k, v), renamed, "Q, K, V")
    if dtype not in ("f16", "bf16"):
        return dtype
    (dk,) = ir.op(g, scores).axes
    aq, ak, av = (set(ir.type_of(g, n).axes) for n in (q, k, v))
    o_axes = ir.type_of(g, out).axes
    s_axes = set(ir.type_of(g, scores).axes)
    own_q = own_rows(g, q, k, v, (dk,), out)
    own_v = av - s_axes
    if x not in ak or x not in av or dk not in ak or not own_q or len(own_v) != 1:
        return "the products are not Q[.. q d] K[.. x d] and P[.. q x] V[.. x e]"
    (dv,) = own_v
    rows = packing.fragment_rows(g, kernel, own_q, q, out, sizes, packed)
    row = packing.name(rows)
    sizes = g.graph["axes"]
    head, width = sizes[dk].size, sizes[dv].size
    if head is None or width is None:
        return f"the head size {' and '.join(f'`{a}`' for a in dict.fromkeys((dk, dv)))} " \
            f"must be static {fix(sizes, dk, dv)}"
    for n in kernel.nodes:
        if n not in chunk and n not in loads and not set(ir.type_of(g, n).axes) <= set(o_axes):
            return "the kernel computes values over other axes than O's"
    batch = tuple(a for a in o_axes if a not in rows and a != dv)
    for n in after:
        if ir.op(g, n).axes != (dv,) or \
                {a for a in o_axes if a != dv} != set(ir.type_of(g, n).axes) or \
                ir.operands(g, n)[0] in chunk:
            return "a sum after the stream is not one over O's columns of O's rows"
        if any(not isinstance(ir.op(g, m), ir.Assign) for m in _readers(g, n, kernel.nodes)):
            return "a sum after the stream is read by other operations than its stores"
    padded = headpad.decide(((q, dk, True), (k, dk, True), (v, dv, False)),
                            ((scores, dk, True), (out, dv, False)), {dk: head, dv: width})
    return FlashSite(scores, soft, out, q, k, v, row, x, dk, dv, batch, dtype, head, width, lse,
                     row_state.kinds(g, st, lse), after,
                     tuple(sources[n] for n in (k, v) if n in sources),
                     rows if len(rows) > 1 else (), padded, renamed)


def own_rows(g, q: int, k: int, v: int, contracted, out: int) -> list[str]:
    """The axes of Q that the fragment rows may run along: O's, not contracted, and absent
    from K and from V (a block stages one tile of keys and one of values for all its rows:
    rows along an axis V varies along, `Q[h q d]` with `V[h x e]` and `K[x d]`, would each
    need their own values; such an axis is a batch axis, one position per block)."""
    others = set(ir.type_of(g, k).axes) | set(ir.type_of(g, v).axes) | set(contracted)
    o_axes = ir.type_of(g, out).axes
    return [a for a in ir.type_of(g, q).axes if a not in others and a in o_axes]


def _operands(g, scores: int, out: int, soft: int, x: str) -> tuple[int, int, int]:
    """(Q, K, V): the scores' operand without x, the one with it, O's other than the
    probabilities (a split's window of V under its mask: its rows past x are zero-filled)."""
    p_op, v = ir.operands(g, out)
    if through(g, v) == soft:
        p_op, v = v, p_op
    q, k = ir.operands(g, scores)
    if x in ir.type_of(g, q).axes:
        q, k = k, q
    return q, k, split.unmasked(g, v)


def _row_sources(g, kernel, q: int, k: int, v: int, scores: int, out: int, x: str,
                 sizes, packed: bool | None = None) -> dict | str:
    """K's and V's row sources (compiler/rowsource.py: operand -> RowSource) where they are
    windows or gathers of loads, or why the tile's copy cannot read one; {} where the
    products are not attention's shape (examine says why after)."""
    contracted = ir.op(g, scores).axes
    o_axes = ir.type_of(g, out).axes
    own_v = set(ir.type_of(g, v).axes) - set(ir.type_of(g, scores).axes)
    own_q = own_rows(g, q, k, v, contracted, out)
    if len(contracted) != 1 or len(own_v) != 1 or not own_q:
        return {}
    (dk,), (dv,) = contracted, own_v
    rows = packing.fragment_rows(g, kernel, own_q, q, out, sizes, packed)
    batch = tuple(a for a in o_axes if a not in rows and a != dv)
    out_sources = {}
    for n, inner in ((k, dk), (v, dv)):
        found = rowsource.of(g, n, kernel.loads, kernel.nodes, x, inner, batch)
        if isinstance(found, str):
            return found
        if found is not None:
            out_sources[n] = found
    return out_sources


def _readers(g, n: int, members) -> set:
    """The kernel's nodes that read n, through its names."""
    out, todo = set(), [n]
    while todo:
        for m in g.successors(todo.pop()):
            if m in members and m not in out:
                out.add(m)
                if isinstance(ir.op(g, m), ir.Assign):
                    todo.append(m)
    return out


def registers(fm, chunk, site: FlashSite, reread=False, width=None):
    """Fragment registers per lane: scores, output accumulators (`width` of O's columns, the
    whole head by default), Q fragments (per entry of arrays of fragments, chunks, `reread`
    and widths): the whole head's held for the key loop, or, re-read from shared memory every
    chunk, REREAD_SLICES 16-wide slices at a time."""
    q = NUMBERS.where(reread, min(REREAD_SLICES, headpad.head_tile(site) // 16),
                      headpad.head_tile(site) // 16)
    width = site.width if width is None else width
    return fm * (chunk // 8) * 4 + fm * headpad.fragments(width) * 4 + fm * q * 4


def search(model: Model, cols, target: Target, sizes: dict, s: FlashSite,
           fixed: dict) -> tuple[Choice, Cost] | None:
    """The fastest FlashAttention-2 tiling that fits, honouring block-level hints; Q re-read
    only where that is REREAD_MARGIN faster than holding it."""
    sizes = packing.sized(packing.of_site(s), sizes)
    found = candidate_set(sizes, s, fixed, columns=column_tiles(s, model))
    if found is None:
        return None
    candidates, ties = found
    cost = evaluate(model, cols, candidates, sizes, target)     # every form, once
    best = warps.cheapest(model, cols, target, sizes, candidates, ties, cost)
    if best is not None and best[0].reread:
        # the best that holds Q, from the same costs: each candidate's cost is its own, and
        # the held forms come first, in the order a set of them alone has (row_tilings)
        held = warps.cheapest(model, cols, target, sizes, candidates, ties, cost,
                              among=np.logical_not(candidates.reread))
        if held and best[1].time > (1 - REREAD_MARGIN) * held[1].time:
            best = held
    return best and (whole_columns(best[0], s), best[1])


def column_tiles(s: FlashSite, model: Model) -> tuple[int, ...]:
    """O's column tiles a block may take (COLUMNS): the whole head, and, in a split's partial
    kernel whose value axis is woven (its own, not the one Q K contracts), the COLUMNS
    narrower than it."""
    tiled = s.lse and s.dv != s.dk and s.dv in model.woven
    return (s.width,) + (tuple(t for t in COLUMNS if t < s.width) if tiled else ())


def whole_columns(choice: Choice, s: FlashSite) -> Choice:
    """The choice without O's column tile where it is the whole head (as before tiles of it
    were candidates: the plan names no tile of a whole axis)."""
    if dict(choice.thread).get(s.dv, 0) < s.width:
        return choice
    return replace(choice, group=tuple(p for p in choice.group if p[0] != s.dv),
                   thread=tuple(p for p in choice.thread if p[0] != s.dv))


def candidate_set(sizes: dict, s: FlashSite, fixed: dict, rereads=REREADS, columns=()):
    """(the tilings the axes and hints allow as a candidate set, the keys breaking ties),
    or None; `columns`: column_tiles, where a block may hold a tile of O's columns (more
    than the whole head)."""
    return row_tilings(packing.sized(packing.of_site(s), sizes), s.row, s.red, s.batch, fixed,
                       lambda fm, chunk, reread, width=None: fits(fm, chunk, s, reread, width),
                       rereads, (s.dv, columns) if len(columns) > 1 else None)


def budget(fm, chunk, site: FlashSite, reread=False, width=None):
    """What the register budget counts per lane (per entry): the fragment registers, and,
    with Q re-read, each score register REREAD_SCORE_WEIGHT times."""
    scores = fm * chunk / 2
    return registers(fm, chunk, site, reread, width) + NUMBERS.where(
        reread, (REREAD_SCORE_WEIGHT - 1) * scores, 0)


def fits(fm, chunk, site: FlashSite, reread=False, width=None):
    """A tiling's fragments fit a lane's registers without spills (per entry): its budget
    within MAX_REGISTERS with Q held, REREAD_MAX_REGISTERS with Q re-read."""
    return budget(fm, chunk, site, reread, width) <= NUMBERS.where(
        reread, REREAD_MAX_REGISTERS, MAX_REGISTERS)


def row_tilings(sizes: dict, row: str, red: str, batch: tuple[str, ...], fixed: dict, fits,
                rereads: tuple[bool, ...] = (False,), columns: tuple | None = None):
    """The (block rows, warps, chunk, Q re-read) tilings of a kernel whose warps stack along
    `row` (attention, chain.py) that the hints allow and whose fragments `fits(fm, chunk,
    reread, width)` (per entry, `width` O's columns), as a candidate set with its
    tie-breaking keys (Q held before Q re-read, then the widest columns), or None.
    `columns`: (O's column axis, the tiles of it a block may take, the whole first) where
    blocks may tile it, else every block holds the whole width (and `fits` is asked
    `fits(fm, chunk, reread)`)."""
    hinted = warps.block_hints(fixed, red, (row,) + ((columns[0],) if columns else ()), batch)
    if hinted is None:
        return None
    hinted, fixed_chunk = hinted
    tiles = columns[1] if columns else (None,)
    shape = (len(rereads) * len(TILINGS), len(tiles))
    bm, wm, chunk = (np.repeat(v[:, None], len(tiles), axis=1)
                     for v in np.tile(TILINGS, (len(rereads), 1)).T)
    reread = np.broadcast_to(np.repeat(np.array(rereads, dtype=bool), len(TILINGS))[:, None],
                             shape)
    width = np.broadcast_to(np.array(tiles, dtype=float)[None, :], shape) if columns else None
    keep = warps.matches(hinted.get(row), bm, sizes[row]) & \
        (bm <= warps.pow2_at_least(sizes[row], 16)) & \
        warps.matches(fixed_chunk, chunk, sizes[red]) & \
        (fits(bm // (16 * wm), chunk, reread, width) if columns else
         fits(bm // (16 * wm), chunk, reread))
    if columns:
        keep = keep & warps.matches(hinted.get(columns[0]), width, sizes[columns[0]])
    keep = np.broadcast_to(keep, shape)
    if not keep.any():
        return None
    bm, wm, chunk = (v[keep].astype(float) for v in (bm, wm, chunk))
    reread = reread[keep] if len(rereads) > 1 else False
    ones = tuple((a, 1) for a in batch)
    cols = ((columns[0], width[keep]),) if columns else ()
    candidates = Choices(((row, bm),) + cols + ones, (red, chunk),
                         ((row, bm / wm),) + cols + ones, (), None, ((row, wm),), reread)
    return candidates, (-bm, -chunk, wm, np.asarray(reread, dtype=float)) + tuple(
        -c for _, c in cols)


__all__ = ["FlashSite", "examine", "search", "registers", "budget", "fits", "row_tilings",
           "column_tiles", "whole_columns", "COLUMNS"]
