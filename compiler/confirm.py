"""Fusion's check of a close merge: the full tile search has the last word.

Greedy fusion (fuse.py) prices every candidate merge with the planner's quick estimate, a
smaller tile search (fewer thread tiles) than the one that plans the kernels it keeps. Where
that estimate calls a merge close (it saves less than CLOSE of the time apart), the full
search may rank the two the other way: a linear layer with its GELU, both stored in bf16
from f32 products on the CUDA cores, is 13.28 ms fused against 13.31 ms apart by the quick
estimate, 10.18 ms against 10.17 ms by the full search (model figures, a100, 4096 each).
Such a merge is priced again by the full search of the merged kernel and of its parts
(`KernelPlanner.planned`, the code explain's unfused figure comes from) and is not made when
fused is slower. Only close merges are checked, to bound the planning cost; the times of
those undone are kept for the boundary's reason (boundaries._reasons).

The two later decisions that price by the quick estimate are checked alike. Recomputation
(recompute.py): a close duplication or merge of kernels is made only where the full search
of the kernels it changes does not price them slower (`worse`); a consumer recomputing all
its producer computes is a merge again: the exact GELU of an f32 product on an A100, 4096
each, is 11.54 ms fused against 10.20 ms apart by the full search (the quick estimate saves
0.5% fused), gelu_erf on hopper-toy 6.80 against 5.79 ms (model figures). And the choice
among the layouts fusion's starts lead to (`fastest`): those within CLOSE of the quickest are
ranked by the full search. Attention's backward on hopper-toy at q = 77, x = 130 keeps a
layout of 22.0 us where the quick estimate's quickest is 29.5 us; attention under the paper's
hints on hopper-toy at b = h = 1 (128 blocks of 32 queries) stores S apart, 298 against 399
us fused (the static SASS agrees: 341 against 362 us of issue-bound time; the paper's test
pins its fused plan); the CUDA-core backward of causal attention at q = 17, x = 21 takes O in
one pass, 12.91 against 13.07 us two-pass (a tie: 13.96 against 13.86 us by static SASS).
"""

from __future__ import annotations

from .clusters import Cluster

# a merge whose quick estimate saves less than this share of the time apart is confirmed
CLOSE = 0.10


class Confirm:
    """`slower(p, c, gain, apart)`: whether fusion should not merge clusters p and c (the
    quick estimate saves `gain` of `apart`); `refused`: {p, c}: (fused, apart) full-search
    seconds of each merge it undid. `worse(before, after, gain, current)`: the same of any
    change of kernels (recomputation's); `fastest(layouts)`: of fusion's results, the one to
    keep. `kernel(cluster)` makes a cluster's kernel."""

    def __init__(self, planner, kernel):
        self.planner, self.kernel = planner, kernel
        self.checked: dict = {}           # {p, c}: whether slower
        self.changes: dict = {}           # (kernels dropped, kernels made): whether worse
        self.refused: dict = {}

    def full(self, ks) -> float:
        """The full search's total time of these kernels (infinite: one has no tiling)."""
        plans = self.planner.planned(list(ks))
        return float("inf") if None in plans else sum(p.cost.time for p in plans)

    def slower(self, p: Cluster, c: Cluster, gain: float, apart: float) -> bool:
        if gain >= CLOSE * apart:
            return False
        pair = frozenset((p, c))
        if pair not in self.checked:
            fused, a, b = self.planner.planned([self.kernel(p | c), self.kernel(p),
                                                self.kernel(c)])
            self.checked[pair] = None not in (fused, a, b) and \
                fused.cost.time > a.cost.time + b.cost.time
            if self.checked[pair]:
                self.refused[pair] = (fused.cost.time, a.cost.time + b.cost.time)
        return self.checked[pair]

    def worse(self, before, after, gain: float, current: float) -> bool:
        """Whether kernels `after` in place of `before`, which the quick estimate says save
        `gain` of `current`, are slower by the full search (asked of close calls only: the
        kernels only one side has are priced, a side with no full tiling losing)."""
        if gain >= CLOSE * current:
            return False
        old = frozenset(k for k in before if k not in after)
        new = frozenset(k for k in after if k not in before)
        if (old, new) not in self.changes:
            self.changes[old, new] = self.full(sorted(new, key=_order)) > \
                self.full(sorted(old, key=_order))
        return self.changes[old, new]

    def fastest(self, layouts: list, quick, kernels):
        """The layout to keep of several (`quick(layout)`: the quick estimate's total,
        `kernels(layout)`: its kernels): the quickest, unless others come within CLOSE of it,
        then the fastest of those by the full search (the first of equal ones)."""
        times = [quick(lay) for lay in layouts]
        best = min(times)
        close = [i for i, t in enumerate(times) if t - best < CLOSE * t]
        # (layouts of the same kernels, as fusion's starts often reach, need no full search)
        if len({frozenset(map(_order, kernels(layouts[i]))) for i in close}) < 2:
            return layouts[times.index(best)]
        full = [self.full(kernels(layouts[i])) for i in close]
        if min(full) == float("inf"):
            return layouts[times.index(best)]
        return layouts[close[full.index(min(full))]]


def _order(k) -> tuple:
    return tuple(sorted(k.equations))
