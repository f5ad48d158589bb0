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
those undone are kept for the boundary's reason (boundaries._reasons). Recomputation
(recompute.py) and the choice among fusion's starts still price by the quick estimate: a
consumer recomputing all its producer computes is such a merge again (gelu_erf on hopper-toy
stays fused, 6.80 ms against 5.79 ms apart by the full search, model figures); checking
those steps too moves layernorm at r=131072, c=16383 on h100 to a plan
tests/fuzz/test_index_width.py flags, so it waits on that check.
"""

from __future__ import annotations

from .clusters import Cluster

# a merge whose quick estimate saves less than this share of the time apart is confirmed
CLOSE = 0.10


class Confirm:
    """`slower(p, c, gain, apart)`: whether fusion should not merge clusters p and c (the
    quick estimate saves `gain` of `apart`); `refused`: {p, c}: (fused, apart) full-search
    seconds of each merge it undid. `kernel(cluster)` makes a cluster's kernel."""

    def __init__(self, planner, kernel):
        self.planner, self.kernel = planner, kernel
        self.checked: dict = {}
        self.refused: dict = {}

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
