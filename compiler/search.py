"""Tile search: the group and stream sizes that minimise predicted time, within capacity.

The variables: at level 1 (blocks), the group size of each woven axis that
some load lacks (a *reuse* axis: bigger groups mean fewer reloads) and the
streamed axis's chunk; at level 2 (threads), each thread's tile of the reuse
axes and which reduced axis, if any, is split across how many threads (their
partial states then merge, as in a warp reduction). Woven axes every load
has gain nothing from bigger groups, so they stay at 1 (except the contiguous
axis of an elementwise kernel, for coalescing). Every combination of powers
of two is evaluated at once (`grid.py`); the fastest that fits wins, ties
going to smaller tiles, so the result is deterministic.
"""

from __future__ import annotations


import numpy as np

from .columns import Column
from .cost import Choice, Cost, evaluate
from .grid import evaluate_grid
from .model import Model
from .target import Target

MAX_TILE = 256
CHUNKS = (8, 16, 32, 64, 128, 256)
THREAD_TILES = (1, 2, 4, 8)
SPLITS = (2, 4, 8, 16, 32)   # lanes of one warp: partial states merge by shuffles
MAX_POINTS = 30_000


def tiles(size: int, cap: int = MAX_TILE, per_octave: int = 1) -> list[int]:
    """Powers of two up to min(size, cap) (finer: `per_octave` steps per doubling), and size."""
    top = min(size, cap)
    out = sorted({round(2 ** (i / per_octave)) for i in range(0, 40 * per_octave)
                  if round(2 ** (i / per_octave)) <= top})
    if size <= cap and size not in out:
        out.append(size)
    return out or [1]


def chunks(size: int, fine: bool = False) -> list[int]:
    base = (1, 2, 4) + CHUNKS if fine else CHUNKS
    out = [c for c in base if c < size]
    out.append(size if size <= base[-1] else base[-1])
    return sorted(set(out))


def reuse_axes(model: Model) -> list[str]:
    loads = [a for a in model.arrays if a.role == "load"]
    return [a for a in model.woven if any(a not in arr.axes for arr in loads)]


def contiguous_axis(model: Model) -> str | None:
    for arr in model.arrays:
        if arr.role == "store" and arr.axes and arr.axes[-1] in model.woven:
            return arr.axes[-1]
    return None


def fits(cost: Cost) -> bool:
    return all(lc.M <= lc.capacity for lc in cost.levels[1:])


QUICK = {"thread": (1, 4), "split": (4, 32), "chunk": (16, 64)}


def _candidates(model: Model, target: Target, sizes: dict, fixed: dict, fine: bool = False,
                quick: bool = False):
    cap = MAX_TILE if target.processors else 1 << 30   # the paper's model has no block limit
    octave = 8 if fine else 1
    reuse = reuse_axes(model)
    if not reuse:
        c = contiguous_axis(model)
        reuse = [c] if c else []
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
        ways = QUICK["split"] if quick else SPLITS
        splits += [(i, w) for i in range(len(model.reduced)) for w in ways]
    return group, chunk, thread, splits


def _shrink(group: dict, thread: dict, chunk: list, splits: list, limit: int = MAX_POINTS) -> None:
    """Keep the grid under `limit` points by thinning the longest candidate lists."""
    def count():
        n = len(chunk) * len(splits)
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
    continuous optima); `quick` searches fewer thread and chunk sizes (fusion's estimates)."""
    fixed = fixed or {}
    group, chunk, thread, splits = _candidates(model, target, sizes, fixed, fine, quick)
    _shrink(group, thread, chunk, splits, MAX_POINTS * (10 if fine else 1))
    names = list(group) + [f"t:{a}" for a in thread]
    lists = list(group.values()) + list(thread.values())
    chunk_idx = len(lists)
    lists.append([c if c is not None else 0 for c in chunk])
    split_idx = len(lists)
    lists.append(list(range(len(splits))))
    mesh = np.meshgrid(*[np.asarray(v, dtype=float) for v in lists], indexing="ij")
    flat = [m.ravel() for m in mesh]
    gvals = {a: flat[i] for i, a in enumerate(group)}
    tvals = {a: flat[len(group) + i] for i, a in enumerate(thread)}
    chunks_ = flat[chunk_idx] if model.streaming.axis is not None else None
    split_choice = flat[split_idx].astype(int)
    split_axis = np.array([s[0] for s in splits])[split_choice] if len(splits) > 1 else None
    ways = np.array([s[1] for s in splits], dtype=float)[split_choice]
    out = evaluate_grid(model, cols, target, sizes, gvals, chunks_, tvals, split_axis, ways,
                        fixed.get("inner"))
    ok = np.ones(flat[0].shape, dtype=bool)
    for cap, M in zip(out["capacity"], out["M"]):
        ok &= np.asarray(M) <= cap
    for a in thread:
        ok &= tvals[a] <= gvals[a]
    if len(target.levels) > 2:
        ok &= np.asarray(out["threads"]) <= target.max_threads_per_block
        if split_axis is not None:
            for i, a in enumerate(model.reduced):
                extent = chunks_ if a == model.streaming.axis else float(sizes[a])
                ok &= (split_axis != i) | (ways <= extent)
    if not ok.any():
        return None
    time = np.where(ok, out["time_total"], np.inf)
    # every key has the grid's shape (a kernel without axes has no group or thread sizes)
    size_key = np.broadcast_to(sum(gvals.values()) + (chunks_ if chunks_ is not None else 0),
                               time.shape)
    thread_key = np.broadcast_to(sum(tvals.values()), time.shape)
    best = np.lexsort((np.broadcast_to(ways, time.shape), thread_key, size_key,
                       np.round(time, 15)))[0]
    choice = _choice(model, sizes, gvals, tvals, chunks_, splits, split_choice, best, fixed)
    cost = evaluate(model, cols, choice, sizes, target)
    return choice, cost


def _choice(model, sizes, gvals, tvals, chunks_, splits, split_choice, i, fixed) -> Choice:
    group = tuple(sorted((a, int(v[i])) for a, v in gvals.items() if int(v[i]) < sizes[a]))
    stream = (model.streaming.axis, int(chunks_[i])) if model.streaming.axis is not None else None
    thread = tuple(sorted((a, int(v[i])) for a, v in tvals.items()))
    s_axis, ways = splits[int(split_choice[i])]
    split = (model.reduced[s_axis], ways) if s_axis >= 0 else None
    return Choice(group, stream, thread, split, fixed.get("inner"))


__all__ = ["search", "tiles", "chunks", "reuse_axes", "fits"]
