"""Tile search: the group and stream sizes that minimise predicted time, within capacity.

The variables: at level 1 (blocks), the group size of each woven axis that
some load lacks (a *reuse* axis: bigger groups mean fewer reloads) and the
streamed axis's chunk; at level 2 (threads), each thread's tile of the reuse
axes and which reduced axis, if any, is split across how many threads (their
partial states then merge, as in a warp reduction). Woven axes every load
has gain nothing from bigger groups, so they stay at 1 (except the contiguous
axis of a store and the one outside it, for coalescing and whole warps). Every combination of powers
of two is a candidate: those a block cannot take (a thread's tile larger
than its group, more threads than a block holds) are left out, the rest form
one candidate set (`cost.Choices`: the tilings by the chunks by the splits,
an open mesh) that `cost.evaluate` costs in one vectorised call. The fastest
that fits wins, ties going to smaller tiles, so the result is deterministic.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import replace

import numpy as np

from . import lanes
from .columns import Column
from .cost import Choice, Choices, Cost, evaluate
from .pick import fastest, fits
from .model import Model
from .target import Target

MAX_TILE = 256
CHUNKS = (8, 16, 32, 64, 128, 256)
THREAD_TILES = (1, 2, 4, 8)
# lanes splitting a reduced axis: those of one warp merge their partial states by shuffles,
# 64 to 1024 (2 to 32 warps) then merge the warps' states through shared memory after a
# barrier (codegen/across_warps.py)
SPLITS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MAX_POINTS = 30_000
WARP_LANES = 32


def tiles(size: int, cap: int = MAX_TILE, per_octave: int = 1) -> list[int]:
    """Powers of two up to min(size, cap) (finer: `per_octave` steps per doubling), and size."""
    return list(_tiles(size, cap, per_octave))


@functools.lru_cache(maxsize=4096)
def _tiles(size: int, cap: int, per_octave: int) -> tuple[int, ...]:
    top = min(size, cap)
    out = sorted({round(2 ** (i / per_octave)) for i in range(0, 40 * per_octave)
                  if round(2 ** (i / per_octave)) <= top})
    if size <= cap and size not in out:
        out.append(size)
    return tuple(out or [1])


def chunks(size: int, fine: bool = False) -> list[int]:
    base = (1, 2, 4) + CHUNKS if fine else CHUNKS
    out = [c for c in base if c < size]
    out.append(size if size <= base[-1] else base[-1])
    return sorted(set(out))


def reuse_axes(model: Model) -> list[str]:
    loads = [a for a in model.arrays if a.role == "load"]
    return [a for a in model.woven if any(a not in arr.axes for arr in loads)]


def contiguous_axes(model: Model) -> list[str]:
    """The first store's innermost woven axis (coalescing: a block of one position along it
    reads a sector a value) and the woven axis outside it there (a block of one row of it
    is a warp or less: blocks per SM, not threads, then limit the resident warps)."""
    for arr in model.arrays:
        if arr.role == "store" and arr.axes and arr.axes[-1] in model.woven:
            return [a for a in arr.axes if a in model.woven][-2:][::-1]
    return []


# (a quick search splits within a warp: with 256 lanes among its ways, fusion's estimate
# fused attention's backward on the CUDA cores into one kernel the full search then priced
# at 228 us against the two kernels' 176 us, h100, d = 4; the full search takes 64 to 1024)
QUICK = {"thread": (1, 4), "split": (4, 32), "chunk": (16, 64)}


def _candidates(model: Model, target: Target, sizes: dict, fixed: dict, fine: bool = False,
                quick: bool = False):
    cap = MAX_TILE if target.processors else 1 << 30   # the paper's model has no block limit
    octave = 8 if fine else 1
    reuse = reuse_axes(model)
    # (not the axis outside the contiguous one where a store copies a load's rows: a thread
    # copies a row in 16-byte runs where it holds one position of the others, row_runs.py)
    contiguous = contiguous_axes(model)[: 1 if model.rows else 2]
    reuse += [a for a in contiguous if a not in reuse]
    group = {}
    for a in model.woven:
        if a in fixed.get("group", {}):
            group[a] = [fixed["group"][a]]
        elif a in reuse:
            group[a] = tiles(sizes[a], cap, octave)
        else:      # no reuse: one position per block, or the thread tile a hint fixes
            group[a] = [max(1, fixed.get("thread", {}).get(a, 1))]
    axis = model.streaming.axis
    if axis is None:
        chunk = [None]
    elif fixed.get("stream"):
        chunk = [fixed["stream"][1]]
    else:
        chunk = chunks(sizes[axis], fine)
        if quick:
            chunk = [c for c in chunk if c in QUICK["chunk"]] or chunk[-1:]
    thread, splits = {}, [(-1, 1)]
    if len(target.levels) > 2:
        tiles_ = QUICK["thread"] if quick else THREAD_TILES
        for a in model.woven:     # a hinted thread tile fixes its axis only
            if a in fixed.get("thread", {}):
                thread[a] = [fixed["thread"][a]]
            else:
                thread[a] = [t for t in tiles_ if t <= max(group[a])]
        # (an axis a view reads at another's position stays in one lane: kernels.relabelled)
        # (a kernel with a scan splits within a warp: a reduction inside the scan's prefix
        # loop cannot merge warps after a barrier, codegen/lane_merges.merge_warps)
        # (nor one a reduction nested in another over it would walk whole: lanes.whole_walks)
        splits += [(i, w) for i, a in enumerate(model.reduced)
                   if a not in model.relabelled and a not in model.whole_walks
                   for w in (_quick_ways(model, sizes, a) if quick else SPLITS)
                   if not model.scans or w <= WARP_LANES]
        if fixed.get("split") and fixed["split"][0] in model.reduced:   # (--lanes: hints.py)
            axis, ways = fixed["split"]
            splits = [(model.reduced.index(axis), ways)]
    return group, chunk, thread, splits


def _quick_ways(model: Model, sizes: dict, axis: str) -> tuple:
    """The ways a quick search splits `axis` over: QUICK's, and the fewest lanes that walk it
    unrolled (compiler/lanes.py: a size the diagram fixes, at most UNROLL_TRIPS trips a lane),
    where the lowering shares each value a lane reads among the thread's points and the model
    charges the lanes' replicated work (issue_pair.py): without them fusion priced attention
    on the CUDA cores at 4 lanes looping over d or 32 each running the softmax. And the most
    lanes of one warp that walk it unrolled: a split's merge over p_x = 8 or 16 splits, one
    lane a split, which the full search takes; without it the quick estimate of the merge of
    O and its logsumexp L (their rows' d whole, 2% of the SMs busy) had 4 lanes each
    walking 2 or 4 splits, 15.0 and 26.5 us against the final plans' 9.2 and 9.1 (paged GQA
    decode, b=1 g=8 r=4 x=1024 d=128, h100 model), and the planner kept d split instead."""
    unrolling = [w for w in SPLITS if axis in model.fixed and
                 lanes.trips(int(sizes[axis]), w) is not None]
    warp = [w for w in unrolling if w <= WARP_LANES]
    return tuple(sorted(set(QUICK["split"]) | set(unrolling[:1]) | set(warp[-1:])))


def _shrink(group: dict, thread: dict, chunk: list, splits: list, limit: int = MAX_POINTS) -> None:
    """Keep the grid under `limit` points by thinning the longest candidate lists (counting
    the splits over one warp only: those over several add at most as many points again, and
    thinning the tiles for them would drop the tiles a kernel without one wants)."""
    def count():
        n = len(chunk) * len([s for s in splits if s[1] <= WARP_LANES])
        for v in list(group.values()) + list(thread.values()):
            n *= len(v)
        return n
    while count() > limit:
        lists = [v for v in list(group.values()) + list(thread.values()) if len(v) > 3]
        if not lists:
            break
        longest = max(lists, key=len)
        del longest[1::2]


def search(model: Model, cols: tuple[Column, ...], target: Target, sizes: dict,
           fixed: dict | None = None, fine: bool = False,
           quick: bool = False) -> tuple[Choice, Cost] | None:
    """The best Choice for this model (its streamed axis is fixed), or None if nothing fits.

    `fine` searches eight sizes per doubling instead of powers of two (for the paper's
    continuous optima); `quick` searches fewer thread and chunk sizes (fusion's estimates).
    `fixed` holds the hints' decisions ("group", "thread", "stream", "inner", "split": the
    lanes of a reduced axis) and may cap
    the threads a block is launched with ("threads": a merge run by another kernel's
    blocks, last_block.py)."""
    fixed = fixed or {}
    found = _candidate_set(model, target, sizes, fixed, fine, quick)
    if found is None:
        return None
    candidates, shape, ties = found
    out = evaluate(model, cols, candidates, sizes, target, fitting=True)
    if out is None:                  # (no tiling's footprint fits)
        return None
    ok = fits(out)
    if len(target.levels) > 2:
        ok = ok & (out.threads <= fixed.get("threads", target.max_threads_per_block))
        stream = dict([candidates.stream]) if candidates.stream else {}
        for a, ways in candidates.split:     # no more threads share an axis than it has
            if not fixed.get("split"):       # (unless a hint says so)
                ok = ok & (ways <= stream.get(a, float(sizes[a])))
    best = fastest(out, ok, ties, shape)
    if best is None:
        return None
    return _choice(model, sizes, candidates.at(best, shape), fixed), out.at(best, shape)


_SEARCHED: OrderedDict = OrderedDict()    # what `searched` answered, by what search reads
_MAX_SEARCHED = 4096


def searched(model: Model, cols: tuple[Column, ...], target: Target, sizes: dict,
             fixed: dict | None = None, quick: bool = False):
    """search(model, cols, target, sizes, fixed, quick=quick), memoised on what it reads:
    the model but for the kernel it names (fusion's candidate kernels that differ in what
    the model does not record have equal models: a tenth of the transformer block backward's
    searches), the columns, target, sizes and fixed decisions. A model that cannot be a key
    is searched."""
    try:
        key = (replace(model, kernel=None), cols, target, tuple(sizes.items()),
               repr(fixed), quick)
        found = _SEARCHED.get(key, _SEARCHED)
    except TypeError:
        return search(model, cols, target, sizes, fixed, quick=quick)
    if found is _SEARCHED:
        found = _SEARCHED[key] = search(model, cols, target, sizes, fixed, quick=quick)
        if len(_SEARCHED) > _MAX_SEARCHED:
            _SEARCHED.popitem(last=False)
    else:
        _SEARCHED.move_to_end(key)
    return found


def _candidate_set(model: Model, target: Target, sizes: dict, fixed: dict, fine: bool,
                   quick: bool):
    """(the candidates, their shape, the keys breaking ties in time), or None: every tiling
    a block can take, by every chunk, by every split (an open mesh: a size varies along its
    own dimension, and the model's terms broadcast)."""
    group, chunk, thread, splits = _candidates(model, target, sizes, fixed, fine, quick)
    _shrink(group, thread, chunk, splits, MAX_POINTS * (10 if fine else 1))
    gvals, tvals = _tilings(group, thread, target)
    if gvals is None:
        return None
    count = len(next(iter(gvals.values()), [0]))
    gvals = {a: v.reshape(-1, 1, 1) for a, v in gvals.items()}
    tvals = {a: v.reshape(-1, 1, 1) for a, v in tvals.items()}
    chunks_ = np.asarray([c if c is not None else 0 for c in chunk], dtype=float).reshape(1, -1, 1)
    split_axis = np.array([s[0] for s in splits]).reshape(1, 1, -1)
    ways = np.array([s[1] for s in splits], dtype=float).reshape(1, 1, -1)
    axis = model.streaming.axis
    candidates = Choices(tuple(gvals.items()), (axis, chunks_) if axis is not None else None,
                         tuple(tvals.items()),
                         tuple((a, np.where(split_axis == i, ways, 1.0))
                               for i, a in enumerate(model.reduced)
                               if any(w > 1 for _, w in splits)),
                         fixed.get("inner"))
    # (what np.broadcast_shapes(candidates.shape, ...) gives: every term is one of the mesh's
    # three dimensions, or a number)
    shape = (count, len(chunk), len(splits))
    # ties go to smaller tiles, then smaller thread tiles, then fewer ways
    ties = (sum(gvals.values()) + (chunks_ if axis is not None else 0), sum(tvals.values()), ways)
    return candidates, shape, ties


def _tilings(group: dict, thread: dict, target: Target):
    """(group sizes, thread tiles): 1-d arrays over every combination of the candidate lists
    (in their mesh order) that a block can take: a thread's tile at most its group's, and no
    more threads than a block holds before any split (which only adds threads). (None, None)
    when there is none."""
    limit = target.max_threads_per_block if len(target.levels) > 2 else None
    found = _combinations(tuple(map(tuple, group.values())), tuple(map(tuple, thread.values())),
                          limit)
    if found is None:
        return None, None
    return dict(zip(group, found)), dict(zip(thread, found[len(group):]))


@functools.lru_cache(maxsize=1024)
def _combinations(group: tuple, thread: tuple, limit: int | None):
    """_tilings on the lists alone (a thread list per group list, the same axes first)."""
    lists = [np.asarray(v, dtype=float) for v in group + thread]
    if not lists:
        return ()
    mesh = np.ix_(*lists)
    keep, threads = True, 1.0
    for g, t in zip(mesh, mesh[len(group):]):
        keep = keep & (t <= g)
        threads = threads * (g / t)
    if limit is not None:     # a margin: the model's own count decides at the boundary
        keep = keep & (threads <= limit * (1 + 1e-9))
    where = np.nonzero(np.broadcast_to(keep, tuple(len(v) for v in lists)))
    if not len(where[0]):
        return None
    out = tuple(v[i] for v, i in zip(lists, where))
    for v in out:
        v.flags.writeable = False        # shared by every search with these lists
    return out


def _choice(model: Model, sizes: dict, one: Choice, fixed: dict) -> Choice:
    """A candidate as the plan records it: whole axes are not groups, thread tiles sorted."""
    group = tuple(sorted((a, g) for a, g in one.group if g < sizes[a]))
    stream = one.stream if model.streaming.axis is not None else None
    return Choice(group, stream, tuple(sorted(one.thread)), one.split, fixed.get("inner"))


__all__ = ["search", "searched", "tiles", "chunks", "reuse_axes", "contiguous_axes", "fits"]
