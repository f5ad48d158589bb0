"""Kernels whose contraction runs on tensor cores (mma.sync m16n8k16), and their warp tiling.

A kernel is eligible when it streams the one axis of its only contraction, `C[batch.. row
col] = sum over red of A[batch.. row red] * B[batch.. red col]` (axes in any order; an operand
may lack some batch axes, as a weight shared by a batch does), whose two operands are loads of
the same 16-bit dtype the target's engine multiplies (f16 or bf16); everything else in the
kernel is elementwise over C's axes (an epilogue: bias, GELU, masks, a cast). Any other kernel
keeps the SIMT path, so every diagram still compiles.

The block takes a `BM x BN` tile of (row, col) and one position of each batch
axis; its `wm x wn` warps each take a `BM/wm x BN/wn` warp tile of 16 x 8
accumulator fragments; chunks of `BK` (a multiple of 16) along `red` are staged
in shared memory and read into fragments with ldmatrix. For the cost model the
register level's unit is the warp: the choice's `thread` tile is the warp tile
(what one unit holds and loads from shared memory), its registers are its 32
lanes' (cost.py), and the block has `32 wm wn` threads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import (chain, chain_sums, colstats, column_epilogue, duals, flash, flash_alone, ir,
               packing, rowsource, split, sums, warps)
from .chain import ChainSite, OneRowAxis
from .graph import ancestors
from .kernels import is_free
from .tilelayout import ROW_PAD as PAD
from .cost import Choice, Choices, Cost
from .flash import FlashSite
from .model import Model, kernel_model, storage_dtype
from .operand_reads import from_loads, renames, vector_loads, views_of
from .operand_reads import rounded as _rounded
from .target import Target
from .warps import FRAGMENT

ROWS = (16, 32, 64, 128, 256)              # block tile candidates along row
COLS = (8, 16, 32, 64, 128, 256)           # ... along col
CHUNKS = (16, 32, 64)                      # ... along red (the streamed chunk)
WARPS = (1, 2, 4, 8)
MAX_ACCUMULATORS = 128                     # f32 accumulator registers per thread
# (bm, bn, bk, wm, wn) in search order: whole warp tiles, whole fragments, accumulators in budget
TILINGS = np.array([(bm, bn, bk, wm, wn) for bm in ROWS for bn in COLS for bk in CHUNKS
                    for wm in WARPS for wn in WARPS
                    if wm * wn in WARPS and not bm % (wm * FRAGMENT[0])
                    and not bn % (wn * FRAGMENT[1])
                    and (bm // wm) * (bn // wn) // 32 <= MAX_ACCUMULATORS])


@dataclass(frozen=True)
class Site(OneRowAxis):
    """Where the tensor cores apply in a kernel: the contraction and its operands' roles."""

    node: int               # the contraction
    a: int                  # operand holding `row` (mma's A fragments)
    b: int                  # operand holding `col` (mma's B fragments)
    row: str
    col: str
    red: str
    batch: tuple[str, ...]
    dtype: str              # f16 | bf16
    computed: tuple[int, ...] = ()   # operands computed from loads as their tiles are staged
                                     # (`X * g` of a norm fused into the product), not copied
    stats: tuple[int, ...] = ()      # reductions over `red` beside the product, of a row or
                                     # column (RMSNorm's `mean[k](X * X)`), computed from
                                     # loads chunk by chunk and read by the epilogue
    renamed: tuple[tuple[int, int], ...] = ()   # (operand, the load it renames): a view
                                     # that only relabels a load's axes (`X[t m2]`) reads the
                                     # load's memory: its tile is copied from the load
    columns: tuple[int, ...] = ()    # row statistics over col in the epilogue (colstats.py)
    pairs: tuple[tuple[int, int, int], ...] = ()   # a sum of products (sums.py): the further
                                     # products (node, A, B) accumulated into node's fragments
    duals: tuple[tuple[int, int, int], ...] = ()   # products sharing the chunk loop, each
                                     # (node, A, B) into fragments of its own (duals.py)

    @property
    def operands(self) -> tuple[tuple[int, int], ...]:
        """(A, B) of every product the site accumulates, the first pair's first."""
        return ((self.a, self.b),) + tuple((a, b) for _, a, b in self.pairs)


def has_mma(target: Target) -> bool:
    return any("contraction" in e.computes and tuple(e.shapes[0]) == FRAGMENT
               for e in target.engines)


SITES = (Site, FlashSite, ChainSite)


def site(g, kernel, model: Model, target: Target, sizes: dict | None = None,
         packed: bool | None = None) -> Site | FlashSite | ChainSite | None:
    """The kernel's tensor-core product, attention or chain of products, or None when it
    must stay SIMT (`packed`: examine's)."""
    found = examine(g, kernel, model, target, sizes, packed)
    return found if isinstance(found, SITES) else None


def sites(g, kernel, model: Model, target: Target, sizes: dict | None = None,
          fixed: dict | None = None) -> tuple:
    """The sites the planner compares: site's, and for an attention whose rows are not packed
    by default (prefill with GQA) but can be (packing.py), the packed form after it (a tie
    keeps the default); one axis of rows where a hint (`fixed`) tiles a packed axis."""
    if not isinstance(found := site(g, kernel, model, target, sizes), FlashSite):
        return () if found is None else (found,)     # (packed forms: an attention's only)
    one, packed = (site(g, kernel, model, target, sizes, p) for p in (False, True))
    if {a for key in ("group", "thread") for a in (fixed or {}).get(key, {})} & set(
            getattr(packed, "packed", ())):
        return () if one is None else (one,)    # (the hint names its axis as the rows)
    return (found,) if found.packed or packed in (None, found) else (found, packed)


def examine(g, kernel, model: Model, target: Target, sizes: dict | None = None,
            packed: bool | None = None) -> Site | FlashSite | ChainSite | str:
    """The kernel's tensor-core product, attention or chain of products, or why it stays
    on the CUDA cores (`sizes`: the planning sizes, which choose the fragment rows, or
    `packed` does: packing.fragment_rows)."""
    if not has_mma(target):
        return f"{target.name} has no mma.sync m16n8k16 tensor cores"
    attention = flash.examine(g, kernel, model, target, sizes, packed)
    if attention is None:       # (row statistics of scores alone: FlashAttention without P V)
        attention = flash_alone.examine(g, kernel, model, target, sizes, packed)
    found = attention if attention is not None else chain.examine(g, kernel, model, target, sizes)
    summed = sums.examine(g, kernel, model, target, Site) if attention is None else None
    if summed is None and attention is None:       # (products with accumulators of their own)
        summed = duals.examine(g, kernel, model, target, Site)
    found = summed if summed is not None else found
    found = found if found is not None else _product(g, kernel, model, target)
    cs = colstats.examine(g, kernel, model, target, sizes, examine) if isinstance(
        found, str) and sizes is not None else "no"      # (a product's row statistics)
    if not isinstance(cs, str):
        return replace(cs.site, columns=tuple(x.node for x in cs.stats))
    if isinstance(found, str):
        return found
    # the blocks tile the site's rows, columns and batch axes: every array the kernel stores
    # must have them (a kernel also storing `t[q]` beside `S[h q x]` cannot group h or x)
    rows = set(getattr(found, "packed", ())) or {found.row}     # (packed: packing.py)
    tiled = rows | set(found.batch) | ({found.col} if isinstance(found, Site) else set())
    # (a chain's products over its rows and its sums are added across blocks: chain_sums.grid)
    lacking = sorted(tiled - packing.expand(model.woven, model) - set(
        chain_sums.grid(g, found) if isinstance(found, ChainSite) else ()))
    if lacking:
        return (f"the kernel also stores arrays without `{lacking[0]}`, which the tensor-core "
                "blocks tile")
    return found


# reductions computed beside a contraction chunk by chunk (rowstats.py), merging in one pass
STAT_KINDS = ("sum", "mean", "max", "min", "var", "logsumexp")
# what an operand or a statistic's argument computed from loads may be made of: elementwise
# ops, names, renaming views, constants and indices (codegen's scalar emitter at each element)


def _product(g, kernel, model: Model, target: Target) -> Site | str:
    """A plain (batched) matrix product with an epilogue, or why not. An operand may be
    computed elementwise from loads (rounded to 16 bits as it is staged), and reductions
    over the streamed axis of a row or a column beside it (`STAT_KINDS`) are computed chunk
    by chunk for the epilogue: RMSNorm fused into the following matrix product."""
    st = model.streaming
    contractions = [n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Contract)]
    if not contractions:
        return "no contraction"
    others = [n for n in kernel.nodes if isinstance(ir.op(g, n), (ir.Reduce, ir.Softmax))]
    if len(contractions) > 1 or any(isinstance(ir.op(g, n), ir.Softmax) for n in others):
        return (f"the kernel fuses {len(contractions)} contraction(s) with {len(others)} other "
                "reduction(s); on tensor cores a kernel is one matrix product (with reductions "
                "of its rows or columns beside it), an attention, or a chain of products")
    node = contractions[0]
    if st.axis in ir.type_of(g, node).axes and not st.pairs and any(   # (logsumexp[x](Q K))
            node in ancestors(g, n) for n in others):
        return (f"the kernel reduces the product's own values over `{st.axis}`: FlashAttention "
                "without P V takes row statistics of one array of scores that are its state "
                "(logsumexp, max, sum of exp), not this one")
    if st.pairs or st.stats or st.passes != 1 or \
            {n for n, _ in st.reducers} != {node, *others}:
        return "the contraction is not streamed"
    op = ir.op(g, node)
    if st.axis is None or op.axes != (st.axis,) or set(model.reduced) != {st.axis}:
        return "the contraction is not over the one streamed axis"
    masked = ir.operands(g, node)
    x, y = (split.unmasked(g, n) for n in masked)   # a split's windows: zeros past x
    loads = set(kernel.loads)
    windows = x != masked[0] or y != masked[1] or split.window(g, x) or split.window(g, y)

    def loaded(n) -> bool:
        return n in loads or (split.window(g, n) or (None,))[0] in loads or \
            (not windows and renames(g, n) in loads)
    computed = tuple(n for n in (x, y) if not loaded(n))
    staged = {}                      # node -> the nodes computing it from the loads
    for n in computed + tuple(others):
        arg = n if n in computed else ir.operands(g, n)[0]
        found = from_loads(g, arg, set(kernel.nodes), loads)
        if windows:         # (the user's axis, not its share s_x)
            axis = (g.graph["axes"][st.axis].derived or (st.axis,))[0]
            return (f"the contraction over `{axis}` is split (--split) and an operand is "
                    "computed from loads; on tensor cores a split product's operands are "
                    "loads (drop the split, or compute the operand in a kernel of its own)")
        if found is None or x == y:
            return ("an operand is computed in the kernel, not loaded or computed elementwise "
                    "from loads (tensor cores take staged tiles)")
        staged[n] = found
    dtype, other = (_computed_dtype(g, staged[n], loads) if n in computed else
                    storage_dtype(g, n) for n in (x, y))
    reads = {n: [u for m in staged[n] for u in ir.operands(g, m) if u in loads]
             if n in computed else [n] for n in (x, y)}
    dtype, other = _rounded(g, reads[x], dtype, other), _rounded(g, reads[y], other, dtype)
    if dtype != other or dtype not in ("f16", "bf16") or not target.engine_for("contraction", dtype):
        return (f"operands are {dtype} and {other}; mma.sync m16n8k16 takes two f16 or two bf16 "
                "operands")
    ax, ay = set(ir.type_of(g, x).axes), set(ir.type_of(g, y).axes)
    out = ir.type_of(g, node).axes
    only_x, only_y = ax - ay, ay - ax
    if not only_x or not only_y:
        return "each operand needs an axis of its own (a matrix product, not a matrix-vector one)"
    if not (only_x | only_y) <= set(out):
        return ("an operand sums an axis of its own in the product (the output lacks "
                f"`{sorted((only_x | only_y) - set(out))[0]}`): not a matrix product")
    # each operand's own axis nearest the output's contiguous end is its fragment axis; the
    # rest (in one operand or both) are batch axes, one position per block
    rx, ry = max(only_x, key=out.index), max(only_y, key=out.index)
    # the output's contiguous one of the two is `col`: a thread stores two adjacent columns
    if out.index(rx) > out.index(ry):
        x, y, rx, ry = y, x, ry, rx
    batch = tuple(a for a in out if a not in (rx, ry))
    for n in others:
        why = _stat(g, n, st.axis, (rx, ry), batch)
        if why:
            return why
    skipped = (loads | {x, y} | set(masked) | {m for found in staged.values() for m in found} |
               {m for n in (x, y) if loaded(n) for m in views_of(g, n)}) - set(kernel.stores)
    for n in set(kernel.nodes) | set(kernel.stores):
        if n in skipped or (windows and is_free(g, n)):      # the windows' position and mask
            continue
        if not set(ir.type_of(g, n).axes) <= set(out):
            return "the kernel computes values over other axes than the product's"
    renamed = tuple((n, renames(g, n)) for n in (x, y) if n not in loads and loaded(n))
    return Site(node, x, y, rx, ry, st.axis, batch, dtype, computed, tuple(others), renamed)


def for_site(g, kernel, model: Model, where, sizes: dict) -> Model:
    """The kernel's model with what a product site computes as it stages (Model.staged: its
    operands computed from loads, its reductions beside the product) and the loads only
    those read (Model.direct: read from global memory, not copied into shared memory); a
    chain's with its rows woven and its products over them added across blocks
    (Model.across)."""
    if getattr(where, "padded", ()):      # heads padded in shared memory (headpad.py)
        model = replace(model, padded=where.padded)
    if isinstance(where, ChainSite) and (where.across or where.sums):
        # the grid's rows (batch axes): every block adds its share of what is summed over them
        grid = chain_sums.grid(g, where)
        return replace(model, woven=tuple(dict.fromkeys(model.woven + grid)),
                       reduced=tuple(a for a in model.reduced if a not in grid),
                       across=frozenset(a.node for a in where.across + where.sums),
                       sums=frozenset(s.node for s in where.sums))
    if isinstance(where, FlashSite):       # (its packed rows one axis: packing.py)
        return _gathered(g, packing.relabel(model, where), where)
    if isinstance(where, Site) and where.columns:     # (one block along col: candidate_set)
        return replace(model, woven=model.woven + (where.col,), reduced=(where.red,),
                       columns=column_epilogue.columns(g, where.row, where.col, where.columns))
    if isinstance(where, Site) and where.pairs:
        return sums.model_of(model, where)
    if isinstance(where, Site) and where.duals:
        return duals.model_of(model, where)
    if not isinstance(where, Site) or not (where.computed or where.stats):
        return model
    members, loads = set(kernel.nodes), set(kernel.loads)
    staged, readers = [], set()
    for n in where.computed + where.stats:
        arg = n if n in where.computed else ir.operands(g, n)[0]
        axes = ir.type_of(g, arg).axes
        axis = where.red if n in where.stats else \
            max((a for a in axes if a in (where.row, where.col, where.red)), key=axes.index)
        found = from_loads(g, arg, members, loads) or set()
        readers |= found
        read = {u for m in found for u in ir.operands(g, m) if u in loads}
        wide = vector_loads(g, arg, axis, members, loads) and not sizes[axis] % 8
        tile = tuple(a for a in axes if a in (where.row, where.col, where.red))
        staged.append((n, tile, 8 if wide else 1, len(read), n in where.computed))
    users = {u: [v for v in g.successors(u) if v in members] for u in loads}
    direct = frozenset(u for u in loads if u not in (where.a, where.b)
                       and users[u] and all(v in readers for v in users[u]))
    return replace(model, staged=tuple(staged), direct=direct)


def _gathered(g, model: Model, where: FlashSite) -> Model:
    """The model of an attention whose K or V rows come through computed positions (a paged
    cache: FlashSite.rows): those tiles' copies compute each row's offset
    (Model.gathered), and the loads their positions read (the page table) are read there,
    per row, not copied (Model.positions)."""
    computed = [r for r in where.rows if r.computed]
    if not computed:
        return model
    inside = {m for r in computed for m in rowsource.nodes(g, r)} - {r.node for r in computed}
    reads = {r for src in computed for r in src.reads}
    positions = frozenset(a.node for a in model.arrays if a.role == "load" and (
        a.node in inside or a.node in reads))
    return replace(model, gathered=frozenset(r.node for r in computed), positions=positions)


def _stat(g, n: int, red: str, frags: tuple[str, str], batch) -> str | None:
    """Why reduction n cannot be computed beside the product (None: it can): one of
    STAT_KINDS over the streamed axis only, of a row or a column of the product's tile."""
    op, axes = ir.op(g, n), set(ir.type_of(g, n).axes)
    if op.fn not in STAT_KINDS or op.axes != (red,) or \
            ir.kind_of_dtype(ir.type_of(g, n).dtype) != "float":
        return (f"the kernel fuses `{op.fn}[{' '.join(op.axes)}]` with the product; on tensor "
                f"cores a reduction beside it is a float {', '.join(STAT_KINDS)} over `{red}` "
                "alone")
    if len(axes & set(frags)) != 1 or not axes - set(frags) <= set(batch):
        return (f"the kernel's `{op.fn}[{red}]` is not over the rows or the columns of the "
                "product (tensor cores compute such reductions beside a product)")
    return None


def _computed_dtype(g, found: set, loads) -> str:
    """The dtype an operand computed from loads (`found`: from_loads's nodes) enters the
    product in: the one 16-bit dtype of the float loads it reads (`relu(A)` of an f16 `A` is
    rounded to f16 as it is staged, as the loads' own values are), else f32 (an f32 load
    among them, or two 16-bit dtypes: beside a 16-bit operand `_rounded` decides)."""
    read = {storage_dtype(g, u) for m in found for u in ir.operands(g, m) if u in loads}
    floats = {d for d in read if ir.kind_of_dtype(d) == "float"}
    return floats.pop() if len(floats) == 1 and floats <= {"f16", "bf16"} else "f32"


def best_site(g, kernel, target: Target, sizes: dict | None = None
              ) -> Site | FlashSite | ChainSite | str:
    """The kernel's tensor-core product or attention, streaming the axis it needs, or why
    not (for attention, the reason given with its keys streamed)."""
    found: Site | FlashSite | ChainSite | str = "no contraction"
    attention = False
    for axis in kernel.reduced(g):
        model = kernel_model(g, kernel, axis)
        result = examine(g, kernel, model, target, sizes)
        if isinstance(result, SITES):
            return result
        if not attention:
            found = result
            attention = bool(model.streaming.pairs)
    return found


def search_site(model: Model, cols, target: Target, sizes: dict, where, fixed: dict):
    """The fastest tensor-core tiling for a product, an attention or a chain site."""
    if isinstance(where, FlashSite):
        return flash.search(model, cols, target, sizes, where, fixed)
    if isinstance(where, ChainSite):
        return chain.search(model, cols, target, sizes, where, fixed)
    return search(model, cols, target, sizes, where, fixed)


def warp_tile(choice: Choice, site_: Site, sizes: dict) -> tuple[int, int, int, int]:
    """(warps along row, along col, warp tile rows, warp tile cols) of a tensor-core choice."""
    warps, tile = dict(choice.warps), dict(choice.thread)
    return warps[site_.row], warps[site_.col], tile[site_.row], tile[site_.col]


def search(model: Model, cols, target: Target, sizes: dict, s: Site,
           fixed: dict) -> tuple[Choice, Cost] | None:
    """The fastest tensor-core tiling of the kernel that fits, honouring block-level hints."""
    found = candidate_set(sizes, s, fixed)
    if found is None:
        return None
    return warps.cheapest(model, cols, target, sizes, *found)


def candidate_set(sizes: dict, s: Site, fixed: dict):
    """(the tilings the axes and hints allow as a candidate set, the keys breaking ties),
    or None."""
    hints = warps.block_hints(fixed, s.red, (s.row, s.col), s.batch)
    if hints is None:
        return None
    hinted, chunk = hints
    bm, bn, bk, wm, wn = _candidates(sizes, s).T.astype(float)
    # every product's accumulators within the budget (duals.py: one tile each)
    keep = (bm / wm) * (bn / wn) / 32 * duals.accumulators(s) <= MAX_ACCUMULATORS
    keep = keep & warps.matches(hinted.get(s.row), bm, sizes[s.row]) & \
        warps.matches(hinted.get(s.col), bn, sizes[s.col]) & \
        warps.matches(chunk, bk, sizes[s.red])
    keep = keep & (bn >= sizes[s.col]) if s.columns else keep   # (colstats: col held whole)
    keep = np.broadcast_to(keep, bm.shape)
    if not keep.any():
        return None
    bm, bn, bk, wm, wn = (v[keep] for v in (bm, bn, bk, wm, wn))
    ones = tuple((a, 1) for a in s.batch)
    candidates = Choices(((s.row, bm), (s.col, bn)) + ones, (s.red, bk),
                         ((s.row, bm / wm), (s.col, bn / wn)) + ones, (), None,
                         ((s.row, wm), (s.col, wn)))
    return candidates, (-(bm * bn), bk, wm * wn)


def _candidates(sizes: dict, s: Site) -> np.ndarray:
    """The tilings (rows of TILINGS) whose block tiles are no larger than the axes need."""
    fm, fn, fk = FRAGMENT
    top = [warps.pow2_at_least(sizes[a], f) for a, f in ((s.row, fm), (s.col, fn), (s.red, fk))]
    return TILINGS[np.all(TILINGS[:, :3] <= top, axis=1)]


__all__ = ["Site", "FlashSite", "ChainSite", "SITES", "site", "sites", "examine", "best_site",
           "search_site", "has_mma", "search", "for_site", "warp_tile", "FRAGMENT", "PAD"]
