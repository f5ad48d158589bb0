"""What a split over several warps costs beyond its shuffles: the merge of the warps' states.

A reduced axis split over more than 32 lanes (search.SPLITS: 64 to 1024, 2 to 32 warps)
merges each warp's lanes by shuffles, as a split of 32 does (issue_simt.merges, the
reductions' shuffles in BLOCK_BASE), then the warps' states through shared memory
(codegen/across_warps.py): at each merge site (a reduction over the split axis, at each of
the thread's points) every warp passes two barriers, its first lane stores the state, and
every lane reads its group's `g = ways / 32` warps' states and folds the g - 1 after the
first into it. Per site and warp that issues ACROSS_SITE (the barriers, the leader's test and
store, the group's first warp) and, per warp of the group after the first, ACROSS_READ per
state variable (its LDS) and the merge's own instructions (`STEP`: an FADD or a max, the
rescaling of a running max and sum, an argmax's comparisons), each after the last: a chain of
g dependent shared-memory reads, beside the barriers' wait (`cycles`, which the block's other
resident blocks may fill: cost.py divides it by them). Counted from the emitted C (the
loop's body is a load and the operator codegen/lane_merges.merge_one emits); not fitted to SASS or
to a GPU run (CALIBRATE on a GPU: benchmarks/gpu_check.py).
"""

from __future__ import annotations

from math import prod

import numpy as np

WARP = 32
ACROSS_SITE = 12
ACROSS_READ = 2
# per warp after the first: the merge operator's instructions by the state merged
STEP = {"sum": 1, "max": 1, "min": 1, "argmax": 6, "argmin": 6, "lse": 25, "pair": 25,
        "mean": 2, "var": 20}       # (a streamed mean's sum and count; Welford's (n, m, q):
                                    # two divisions, codegen/lane_merges.merge_one)
# per site, in cycles: the two barriers (waits.BARRIER_CYCLES each) and, per warp of the
# group, a shared-memory read's latency and the operator after it
SITE_CYCLES = 60
WARP_CYCLES = 40
# the merge sites of a reduction over the whole split axis (not streamed), by its op: a
# variance its mean and then its squares, a softmax's or a logsumexp's statistics a max then
# a sum (one running state where read once, Model.online)
SITES = {"sum": (("sum", 1),), "mean": (("sum", 1),), "max": (("max", 1),),
         "min": (("min", 1),), "var": (("sum", 1), ("sum", 1)),
         "argmax": (("argmax", 2),), "argmin": (("argmin", 2),),
         "logsumexp": (("max", 1), ("sum", 1)), "softmax": (("max", 1), ("sum", 1)),
         "contract": (("sum", 1),)}
ONLINE = (("lse", 2),)
# a streamed accumulator's merge by the reduction it runs (else a sum, or the online
# softmax's (m, l, o) where paired with a contraction)
_STREAMED = {"argmax": "argmax", "argmin": "argmin", "logsumexp": "lse", "softmax": "lse",
             "mean": "mean", "var": "var"}


def groups(choice, axis: str):
    """Warps of a split group along `axis` (per candidate of a Choices), 1 where not split
    over more than a warp."""
    ways = np.asarray(dict(choice.split).get(axis, 1.0), dtype=float)
    return np.maximum(ways / WARP, 1.0)


def sites(model, choice, sizes: dict):
    """(split axis, kind, state variables, the merges a thread runs per block tile) for each
    merge site of the kernel over a split axis: its streamed accumulators after their pass
    where the lanes split the streamed axis (at each of the thread's points), and its
    reductions over a whole split axis (at each of the thread's points, and at each position
    of the streamed axis where they run inside its loop: a score's sum over a split head).
    (exchange_bytes, instructions and cycles ask it of one evaluation's candidates in turn:
    the last answer is kept, for the very objects it was asked of.)"""
    if not choice.split:        # (no merge site without a split axis)
        return []
    last = _last_sites
    if last and last[0] is model and last[1] is choice and last[2] is sizes \
            and last[3] == sizes:
        return last[4]
    out = _sites(model, choice, sizes)
    _last_sites[:] = [model, choice, sizes, dict(sizes), out]
    return out


_last_sites: list = []    # [model, choice, sizes, a copy of sizes, sites]: the last asked


def _sites(model, choice, sizes: dict):
    split = [a for a, _ in choice.split]
    thread = dict(choice.thread)
    stream = choice.stream[0] if choice.stream else None
    paired = {c for _, c in model.streaming.pairs}
    out = []
    op = {w.node: w.op for w in model.work}
    for a in model.arrays:
        if a.role == "accumulator" and stream in split:
            held = prod(thread[x] for x in a.axes if x in thread)
            out.append((stream, _STREAMED.get(op.get(a.node), "pair" if a.node in paired
                                              else "sum"), a.slots, held))
    for w in model.work:
        if w.op == "contract" or w.engine == "contraction":
            ops = SITES["contract"]
        else:
            ops = ONLINE if w.node in model.online else SITES.get(w.op, ())
        for axis in split:
            if axis in w.axes and axis != stream:
                held = prod(thread[x] for x in w.axes if x in thread) * \
                    (sizes[stream] if stream in w.axes else 1)
                out += [(axis, kind, slots, held) for kind, slots in ops]
    return out


def exchange_bytes(model, choice, sizes: dict, threads):
    """Shared memory of the merges across warps (codegen/across_warps.merge): at each merge
    site, a buffer per state variable holding a value per warp of the block (`threads`
    launched) -- a streamed accumulator's the thread's points of it (sites: `held`), an
    argmax's position 8 bytes -- each aligned to 16 bytes as the kernel allocates it; 0
    where no candidate splits over more than a warp."""
    warps = np.ceil(np.asarray(threads, dtype=float) / WARP)
    stream = choice.stream[0] if choice.stream else None
    total = 0.0
    reduction: dict = {}        # widths -> a reduction's cells (the same at every site)
    for axis, kind, slots, held in sites(model, choice, sizes):
        split = _split(choice, axis)
        if split is None:
            continue
        widths = (4, 8) if kind in ("argmax", "argmin") else (4,) * slots
        if axis == stream:
            cells = sum(_aligned(warps * held * w) for w in widths)
        else:                  # (a reduction's: one value, however often)
            if widths not in reduction:
                reduction[widths] = sum(_aligned(warps * 1.0 * w) for w in widths)
            cells = reduction[widths]
        total = total + np.where(split, cells, 0.0)
    return total


def _aligned(nbytes):
    return np.ceil(np.asarray(nbytes, dtype=float) / 16) * 16


def instructions(model, choice, sizes: dict):
    """Instructions each warp issues per block tile to merge the warps' states (0 where no
    candidate splits over more than a warp)."""
    total = 0.0
    for axis, kind, slots, held in sites(model, choice, sizes):
        g = groups(choice, axis)
        split = _split(choice, axis, g)
        if split is None:
            continue
        total = total + np.where(split, held * (ACROSS_SITE + (g - 1) * (
            slots * ACROSS_READ + STEP[kind])), 0.0)
    return total


def cycles(model, choice, sizes: dict):
    """Cycles a block tile waits at its merges across warps (the barriers, the chain of
    shared-memory reads), 0 where none."""
    total = 0.0
    for axis, _, _, held in sites(model, choice, sizes):
        g = groups(choice, axis)
        split = _split(choice, axis, g)
        if split is None:
            continue
        total = total + np.where(split, held * (SITE_CYCLES + g * WARP_CYCLES), 0.0)
    return total


def _split(choice, axis: str, g=None):
    """Per candidate, whether `axis` is split over more than a warp; None where no candidate
    splits it so (a site's term is then 0 everywhere, and not computed)."""
    split = (groups(choice, axis) if g is None else g) > 1
    return split if split.any() else None
