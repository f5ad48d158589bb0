"""Sibling products tiled together so that they share one launch (decided once, in stage `tile`).

siblings.py launches independent tensor-core products that read one array as one grid, but
only members of one block shape (one kernel's `__launch_bounds__`; padding a smaller member
with idle warps was studied and rejected: docs/tensor-cores.md). Each kernel's search tiles
it alone, so siblings of different sizes can get different shapes: at t=4096 m=2048 (the
projections of self-attention, h100) Q's best tiling has 256 threads a block and K's and V's
128, and Q launches apart (model: 128.2 us). K and V tiled as Q share one launch with it
(model: 114.9 us): each pays a little more alone, the three save two launches, a partial
wave and two reads of X from HBM.

Siblings of one block shape may share a launch faster at another: at t=512 m=n=k=2048 each
projection alone is best in blocks of 64 threads (a small grid fills the GPU with small
blocks), and the three in one launch at 128 threads (192 blocks, one wave) take 36.1 us
against 54.3 us at 64 (model, h100).

`decide` (the planner's; variants.with_choices keeps the tilings it is given and calls
siblings.decide alone): per set of candidate siblings (clusters.sibling_readers over the
kernels siblings.eligible takes, mma.sync ones with no hint: a hinted tiling is the user's),
and per thread count an mma.sync block can have (`THREADS`; for a set of one count, the
others), the members of other counts are tiled at that count: each its `KEEP` fastest tilings there
(tiling_rank.ranked at those threads, the candidates its own search priced), tried member by
member beside its own tiling, each kept where the plan's predicted time with the launches
siblings.decide makes of it (priced by siblings.price) is least. The fastest such option is
taken where it is faster than the plan as tiled (each option's `time` against its `alone`);
by more than what the model resolves (pick.NEAR: a plan is not moved for less); the
members tiled again and their threads alone are recorded on their launch
(siblings.Launch.retiled, .alone: explain says why a member is not tiled as its own best).
Lowering reads the kernels' choices and the launches as ever.

Planning cost: nothing without siblings; else one evaluation of a member's tensor-core
candidate set per thread count tried (`THREADS`: four), and at most TRIALS siblings.decide
calls (prices of a handful of kernels) per count (record_plans: 11.9 CPU-s, as before).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

from ..diagrams.diagnostics import NapkinError
from . import siblings, tensorcore, tiling_rank
from .clusters import sibling_readers
from .kernel_plan import kernel_plan
from .pick import NEAR
from .target import Target

KEEP = 3            # a member's fastest block tiles at a thread count that are tried
THREADS = tuple(sorted({32 * w for w in tensorcore.WARPS}))   # a block's threads an mma.sync tiling has
RANKED = 64         # ... among its fastest tilings there (chunks and warps of each tile)
TRIALS = 64         # the most combinations of members' tilings priced per thread count


@dataclass(frozen=True)
class Option:
    """A set of siblings with some members tiled at `threads` threads a block."""
    threads: int
    retiled: tuple[int, ...]        # the members tiled otherwise than alone
    time: float                     # seconds: the plan's predicted time with them
    alone: float                    # seconds: the plan's predicted time as tiled alone
    kernels: tuple                  # the plan's kernels with them (their own costs)


def _total(g, kernels, sizes: dict, target: Target, tails) -> float:
    """The plan's predicted seconds with these kernels, its launches decided for them."""
    shared, _ = siblings.decide(g, tuple(kernels), sizes, target, tails)
    return sum(float(kp.cost.time) for kp in shared)


def _retileable(kp) -> bool:
    """A plain mma.sync product whose tiling the planner chose (no hint)."""
    return isinstance(kp.schedule.site, tensorcore.Site) and not kp.hints and \
        kp.schedule.instruction == "mma.sync"


def tiled_at(g, kp, threads: int, sizes: dict, target: Target) -> list:
    """The kernel's tensor-core tilings of `threads` threads a block that fit, the fastest
    of each count of blocks (what a shared launch's waves count: at t=4096 m=2048 K's
    fastest 256-thread tiling alone has 128 blocks, 26.4 us, and its 64 blocks of 256 x 128,
    36.9 us, share Q's launch faster), `KEEP` of them, fastest first, each a KernelPlan with
    its checked schedule."""
    out, counts = [], set()
    for choice, cost in tiling_rank.ranked(kp.model, kp.columns, target, sizes,
                                          kp.schedule.site, RANKED, threads=threads):
        if len(out) == KEEP:
            break
        try:
            one = kernel_plan(g, kp.kernel, kp.model, kp.columns, choice, cost, kp.hints,
                              sizes, target)
        except NapkinError:          # (a tiling the schedule refuses: not a candidate)
            continue
        n = (siblings.blocks(one, sizes), int(cost.blocks_per_sm))
        if n not in counts:
            counts.add(n)
            out.append(one)
    return out


def options(g, kernels: tuple, sizes: dict, target: Target, tails=()) -> list[Option]:
    """The options of the first set of siblings (the most members first), one per thread
    count `_priced` tries, priced against the plan as tiled; [] where there is none."""
    groups = _groups(kernels, tails)
    return _priced(g, kernels, groups[0], sizes, target, tails) if groups else []


def _priced(g, kernels: tuple, group, sizes: dict, target: Target, tails) -> list[Option]:
    """`group`'s options, one per thread count a block of mma.sync warps can have but one
    every member has (where a member can take it)."""
    have = {kernels[i].schedule.threads for i in group}
    counts = sorted(set(THREADS) | have) if len(have) > 1 else sorted(set(THREADS) - have)
    return [o for t in counts
            if (o := _option(g, kernels, group, t, sizes, target, tails)) is not None]


def _groups(kernels: tuple, tails) -> list[tuple[int, ...]]:
    """The sets of candidate siblings (of re-tileable members), the most members first."""
    ok = {i for i, kp in enumerate(kernels) if siblings.eligible(kp, i, tails)
          and _retileable(kp)}
    if len(ok) < 2:
        return []
    found = sorted(sibling_readers([kp.kernel for kp in kernels], ok),
                   key=lambda s: (-len(s[1]), s[1]))
    out: list[tuple[int, ...]] = []
    for _, group in found:
        if group not in out:
            out.append(group)
    return out


def _option(g, kernels: tuple, group, threads: int, sizes: dict, target: Target, tails):
    """The members of `group` not of `threads` tiled at it, each one of its few tilings
    there or its own, one at least tiled again: the combination of least predicted plan
    time (faster than the plan as tiled or not); None where none can be."""
    alts = {j: tiled_at(g, kernels[j], threads, sizes, target) for j in group
            if kernels[j].schedule.threads != threads}
    alts = {j: a for j, a in alts.items() if a}
    if not alts:
        return None
    keep = KEEP
    while keep > 1 and (keep + 1) ** len(alts) > TRIALS:
        keep -= 1
    time, trial = math.inf, None
    # every member its own tiling or one of its `keep` there, one at least tiled again (at
    # most TRIALS of them)
    for picked in itertools.islice(itertools.product(
            *[(kernels[j], *a[:keep]) for j, a in alts.items()]), 1, TRIALS + 1):
        other = list(kernels)
        for j, kp in zip(alts, picked):
            other[j] = kp
        t = _total(g, other, sizes, target, tails)
        if t < time:
            time, trial = t, other
    if trial is None:
        return None
    retiled = tuple(j for j in alts if trial[j] is not kernels[j])
    alone = _total(g, kernels, sizes, target, tails)
    return Option(threads, retiled, time, alone, tuple(trial))


def decide(g, kernels: tuple, sizes: dict, target: Target, tails=()):
    """(the kernels, each launch member's cost its share; the launches), as siblings.decide,
    with members of sibling sets tiled at another thread count where the plan is predicted
    faster so (module doc): each set once, the most members first, its fastest option taken
    where faster than the plan before it, the next set priced with it (projected self-attention's gradient at t=s=4096 m=2048
    h=16: dWq, reading dQ as dX does, tiled at dX's 256 threads, 980.9 -> 979.3 us; then
    dWk and dWv, reading X as dWq does, tiled as it share its launch: 957.2 us, model,
    h100). All of it is kept where the plan is faster than as tiled alone by more than
    pick.NEAR (a step alone may gain less, as the first there)."""
    if not target.processors:
        return kernels, ()
    alone = tuple(kernels)
    retiled: set[int] = set()
    done: list[tuple[int, ...]] = []
    while True:
        group = next((s for s in _groups(kernels, tails) if s not in done), None)
        if group is None:
            break
        done.append(group)
        best = min(_priced(g, kernels, group, sizes, target, tails), key=lambda o: o.time,
                   default=None)
        if best is not None and best.time < best.alone:
            retiled.update(best.retiled)
            kernels = best.kernels
    own, launches = siblings.decide(g, alone, sizes, target, tails)
    if not retiled:
        return own, launches
    shared, launches = siblings.decide(g, kernels, sizes, target, tails)
    if sum(float(kp.cost.time) for kp in shared) >= \
            sum(float(kp.cost.time) for kp in own) * (1 - NEAR):
        return siblings.decide(g, alone, sizes, target, tails)
    threads = {j: alone[j].schedule.threads for j in retiled}
    return shared, tuple(_recorded(la, threads, own) for la in launches)


def _recorded(la, retiled: dict, own) -> siblings.Launch:
    """A launch with the members tiled to share it and their time as tiled alone."""
    mine = tuple((j, retiled[j]) for j in la.members if j in retiled)
    if not mine:
        return la
    return replace(la, retiled=mine, alone=sum(float(own[j].cost.time) for j in la.members))


def kept(old, new, same=lambda i: True) -> tuple:
    """The launches `new` (decided again: variants.with_merge, with_choices) with what
    `old`'s launch of the same members recorded of members tiled to share it, where each
    member is `same` (tiled as it was then)."""
    by = {la.members: la for la in old}
    return tuple(replace(la, retiled=by[la.members].retiled, alone=by[la.members].alone)
                 if la.members in by and all(map(same, la.members)) else la for la in new)


__all__ = ["KEEP", "Option", "decide", "kept", "options", "tiled_at"]
