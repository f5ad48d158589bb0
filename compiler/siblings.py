"""Sibling products in one launch: independent tensor-core product kernels that read one array.

The block's projections `Q = N1 Wq`, `K = N1 Wk`, `V = N1 Wv` (and in its gradient the
weight gradients, each contracting the same N1 against another cotangent) are kernels of
their own, none reading what another stores, each re-reading N1. Launched apart, each pays a
launch, the first tiles of each of its waves, and a partial last wave; and each reads N1 from
HBM. Launched together as one grid that is the concatenation of their block grids (each
block computes one tile of one product: codegen/launch.py), they pay one launch, the waves of
the summed blocks, and the members after the first find the shared array in L2 when it fits
there (it was just read by the first's blocks).

`decide` prices each candidate set (clusters.sibling_readers: kernels reading one array and
depending on none of each other, placed where the first launches) from the kernels' own
costs (cost.py: time = (worst term + OVERLAP * the rest) / utilization + first tiles per
wave + a launch):

    together = sum of each member's terms at full utilisation (its HBM term less the shared
               array's bytes for all but the first) / the summed grid's utilization
               + each wave of the summed grid's first tiles + one launch

and keeps a member where that is less than its launch apart (members of one block shape:
the planner tiles siblings of different shapes to one first where that is faster,
sibling_tiles.py). The decision is `Plan.launches`
(one `Launch` per set), which lowering (codegen/lower.py) and explain read; each member's
cost is its share of the launch's time (so a plan's time stays the sum of its kernels').
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from . import ir, packing
from .arrays import BYTES, array_name, storage_dtype
from .clusters import sibling_readers
from .cost import LAUNCH_SECONDS, OVERLAP
from .occupancy import busy_share
from .schedule import PRODUCT
from .target import Target


@dataclass(frozen=True)
class Launch:
    """Kernels (indices in launch order) launched as one grid, where the first launches."""
    members: tuple[int, ...]
    shared: str                # the array they all read (its name in explain's words)
    blocks: tuple[int, ...]    # each member's blocks (the grid is their sum)
    waves: int                 # waves of the summed grid
    apart: float               # seconds, each in a launch of its own
    together: float            # seconds, in one launch
    from_l2: float             # bytes of the shared array the members after the first read
                               # from L2 (0: it does not fit there)
    retiled: tuple[tuple[int, int], ...] = ()   # (member, its threads tiled alone): members
                               # tiled at the launch's block shape to share it (sibling_tiles.py)
    alone: float = 0.0         # seconds of the members in the plan as each was tiled alone
                               # (what the launch beat; 0: no member was tiled again)


def eligible(kp, i: int, tails) -> bool:
    """A plain tensor-core product kernel: its own launch, no atomics across blocks, no split's
    merge run by its last blocks (those add code and counters to its grid)."""
    s = kp.schedule
    in_tail = any(i == t.partial or i in t.merges for t in tails or ())
    return s.engine == PRODUCT and s.tensor_cores and not s.across and not in_tail


def blocks(kp, sizes: dict) -> int:
    """The blocks a kernel launches: its tiles along every woven axis (codegen's grid)."""
    sized = packing.sized(kp.model.packed, sizes)
    return math.prod(-(-int(sized[a]) // int(t)) for a, t in kp.schedule.tile)


def _busy(cost, hbm_less: float) -> float:
    """A kernel's seconds at full utilization (cost.py's worst term plus OVERLAP times the
    rest), its HBM term less `hbm_less` seconds."""
    terms = [max(0.0, t - hbm_less) if name == "HBM bandwidth" else float(t)
             for name, t in cost.terms]
    worst = max(terms)
    return worst + OVERLAP * (sum(terms) - worst)


def _fill_per_wave(kp, n: int, target: Target) -> float:
    """The seconds each wave of a kernel's blocks waits for its first tiles: what its time
    holds beside its terms and its launch (cost.py), over its waves."""
    c = kp.cost
    filled = max(0.0, float(c.time) - _busy(c, 0.0) / float(c.utilization) - LAUNCH_SECONDS)
    return filled / math.ceil(n / (target.processors * int(c.blocks_per_sm)))


def price(kps, n_blocks, shared_bytes: float, target: Target) -> tuple[float, int, float]:
    """(seconds, waves, bytes read from L2) of kernels launched as one grid, in this order."""
    bw = target.levels[1].bandwidth
    from_l2 = shared_bytes if target.l2_bytes and shared_bytes <= target.l2_bytes / 2 else 0.0
    busy = sum(_busy(kp.cost, from_l2 / bw if i else 0.0) for i, kp in enumerate(kps))
    per_sm = min(int(kp.cost.blocks_per_sm) for kp in kps)
    # what else than idle slots a member's utilization holds (latency not hidden: none for a
    # pipelined tensor-core product)
    rest = min(float(kp.cost.utilization) / float(busy_share(target, n, int(kp.cost.blocks_per_sm)))
               for kp, n in zip(kps, n_blocks))
    total = sum(n_blocks)
    util = float(busy_share(target, total, per_sm)) * min(1.0, rest)
    slots = target.processors * per_sm
    waves = -(-total // slots)
    # each wave waits for its first tiles: the slowest of the members it holds. A member's
    # blocks are consecutive, so only its first and last waves can hold another's blocks:
    # those are kept per wave, the waves between counted at once (a grid may have billions)
    edges: dict[int, float] = {}
    inner = 0.0
    start = 0
    for kp, n in zip(kps, n_blocks):
        f = _fill_per_wave(kp, n, target)
        first, last = start // slots, (start + n - 1) // slots
        for w in {first, last}:
            edges[w] = max(edges.get(w, 0.0), f)
        inner += f * max(0, last - first - 1)
        start += n
    return busy / util + inner + sum(edges.values()) + LAUNCH_SECONDS, waves, \
        from_l2 * (len(kps) - 1)


def decide(g, kernels: tuple, sizes: dict, target: Target, tails=()):
    """(the kernels, each member's cost its share of its launch; the launches), greedily:
    per array read by candidate siblings (the largest first), each sibling kept where the
    launch with it is faster than the launch without it and its own apart."""
    if not target.processors or len(kernels) < 2:
        return kernels, ()
    ok = {i for i, kp in enumerate(kernels) if eligible(kp, i, tails)}
    if len(ok) < 2:
        return kernels, ()
    n_blocks = {i: blocks(kernels[i], sizes) for i in ok}

    def nbytes(u: int) -> float:
        return BYTES.get(storage_dtype(g, u), 4) * math.prod(
            sizes[a] for a in ir.type_of(g, u).axes)
    sets = sorted(sibling_readers([kp.kernel for kp in kernels], ok),
                  key=lambda s: (-nbytes(s[0]), -len(s[1]), s[1]))
    taken: set[int] = set()
    launches = []
    for u, group in sets:
        first = group[0]
        if first in taken:
            continue
        like = kernels[first].schedule
        members = [first]

        @functools.cache
        def cost(ms: tuple) -> tuple:
            return price([kernels[i] for i in ms], [n_blocks[i] for i in ms], nbytes(u), target)
        for j in group[1:]:
            s = kernels[j].schedule
            if j in taken or s.threads != like.threads or s.instruction != like.instruction:
                continue
            apart = cost(tuple(members))[0] if len(members) > 1 else float(kernels[first].cost.time)
            if cost(tuple(members + [j]))[0] < apart + float(kernels[j].cost.time):
                members.append(j)
        if len(members) < 2:
            continue
        together, waves, from_l2 = cost(tuple(members))
        taken.update(members)
        apart = sum(float(kernels[i].cost.time) for i in members)
        launches.append(Launch(tuple(members), array_name(g, u),
                               tuple(n_blocks[i] for i in members), waves, apart, together,
                               from_l2))
    if not launches:
        return kernels, ()
    out = list(kernels)
    for la in launches:
        for i in la.members:
            c = kernels[i].cost
            out[i] = replace(kernels[i], cost=replace(c, time=float(c.time) * la.together / la.apart))
    return tuple(out), tuple(sorted(launches, key=lambda la: la.members[0]))


def unshared(kernels: tuple, launches) -> tuple:
    """The kernels with each launch member's cost its own again (what `decide` priced), for
    a plan decided again (variants.with_merge)."""
    out = list(kernels)
    for la in launches:
        for i in la.members:
            c = kernels[i].cost
            out[i] = replace(kernels[i], cost=replace(c, time=float(c.time) * la.apart / la.together))
    return tuple(out)


def launch_of(launches, i: int) -> Launch | None:
    """The launch kernel `i` shares, if any."""
    return next((la for la in launches if i in la.members), None)


__all__ = ["Launch", "blocks", "decide", "eligible", "launch_of", "price", "unshared"]
