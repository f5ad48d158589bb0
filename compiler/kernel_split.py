"""A split of one kernel of a plan (part of stage `fuse`, beside splitting.py's split of the
diagram): a reduction whose outputs are few beside the extent it reduces (a gain's gradient
`dg[d] = sum[h t](...)`, a bias's `db[n] = sum[t](dY)`) runs on few blocks even where the
plan's other kernels fill the GPU. Split across the diagram, its axis would rewrite every
reduction over it (QK-norm attention's gradient: the keys' and values' gradients contract
over `t` too, 29.2 ms split against 1.55 ms unsplit, h100 model), so no split was chosen.

Here the split rewrites the statements of the kernels that ask for it alone
(`split.split(..., within=)`): their reductions over the axis become partial states and a
merge, and the arrays other kernels compute and store enter the split as the diagram's
inputs do (gathered at the split's positions). The other kernels keep their statements and
their grouping (`fuse(problem, like)`): the kernel split becomes its partial kernel and its
merge kernel. Each count is priced by the quick estimates, the best one by the final plans of
the kernels it changes (the merge where it runs fastest, as `--merge auto`) against the
unsplit kernel's, and the split is taken only when it is faster by both.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ir, packing
from . import split as splits

UNDERFILLED = 0.75     # (splitting.UNDERFILLED: a kernel busy below this invites a split)
MIN_SHARE = 32         # positions of the split axis per split, at least (splitting.MIN_SHARE)
LONG = 4096            # reductions at least this long (the product of the axes it reduces)
MAX_PARTS = 256
MIN_GAIN = 0.02        # the kernels asking take at least this share of the plan's time


@dataclass(frozen=True)
class Group:
    """A kernel's statements, for `fuse(problem, like)` (fuse.regroup)."""
    equations: tuple
    recomputed: tuple = ()


@dataclass(frozen=True)
class _Like:
    kernels: tuple


def under_filled(fused, k) -> bool:
    """Whether kernel k's blocks leave the GPU idle by the quick estimates (busy below
    UNDERFILLED, or fewer blocks than one wave of the SMs' block slots)."""
    est = fused.planner.estimate(k)
    if est is None:
        return False
    problem = fused.problem
    group = dict(est.choice.group)
    sizes = packing.sized(est.model.packed, problem.sizes)
    blocks = 1
    for a in est.model.woven:
        blocks *= -(-sizes[a] // group.get(a, sizes[a]))
    slots = problem.target.processors * max(1, int(est.cost.blocks_per_sm))
    return est.cost.utilization < UNDERFILLED or blocks < slots


def candidates(fused) -> dict[str, frozenset]:
    """{axis: the statements of the kernels asking for its split}: of the under-filled
    kernels of a plan of several, each reduced axis that splits within the kernel's own
    statements, whose reductions there reduce at least LONG positions; an axis asked for by
    several kernels splits in all of them (layernorm's dgamma and dbeta). On a plan with
    kernels split already (best: one more each round), the axes they split are not asked."""
    problem = fused.problem
    g = problem.graph
    done = splits.infos(g)
    if not problem.target.processors or len(fused.kernels) < 2 or \
            any(info.within is None for info in done):
        return {}
    taken = {a for info in done for a in (info.axis, info.part_axis, info.share_axis)}
    out: dict[str, set] = {}
    asking: dict[str, float] = {}       # axis -> the time of the kernels asking for it
    whole = 0.0
    for k in fused.kernels:
        est = fused.planner.estimate(k)
        whole += float(est.cost.time) if est is not None else 0.0
        if not under_filled(fused, k):
            continue
        own = frozenset(k.equations)
        for a in k.reduced(g):
            if a in g.graph["axes"] and a not in taken and problem.sizes[a] >= 2 * MIN_SHARE and \
                    _extent(g, k, a, problem.sizes) >= LONG and \
                    splits.splittable(g, a, own) is None:
                out.setdefault(a, set()).update(own)
                asking[a] = asking.get(a, 0.0) + float(est.cost.time)
    # (a split cannot gain more than the time of the kernels it fills: splitting.MIN_GAIN)
    return {a: frozenset(s) for a, s in out.items() if asking[a] >= MIN_GAIN * whole
            and splits.splittable(g, a, frozenset(s)) is None}


def _extent(g, k, axis: str, sizes: dict) -> int:
    """The most positions a reduction of kernel k over `axis` reduces (all its axes)."""
    most = 0
    for n in k.nodes:
        op = ir.op(g, n)
        if isinstance(op, (ir.Reduce, ir.Contract)) and axis in op.axes:
            count = 1
            for a in op.axes:
                count *= sizes.get(a, 1)
            most = max(most, count)
    return most


def counts(size: int) -> list[int]:
    """The split counts priced: powers of two from 2, at least MIN_SHARE positions each."""
    out, parts = [], 2
    while parts <= MAX_PARTS and size >= parts * MIN_SHARE:
        out.append(parts)
        parts *= 2
    return out


def regrouped(base, pr) -> _Like:
    """The base fusion's kernels on the split graph: each kernel split keeps its statements
    (their merges now); its partial statements, any a split moved (statements the base does
    not have) and those of its statements now computed over the split's share (a softmax
    rebuilt over it) go to a kernel before it."""
    g = pr.graph
    info = g.graph["split"]
    known = {s for k in base.kernels for s in k.equations}
    split = _split(base, info)
    mine = {s for k in split for s in k.equations}
    new = tuple(sorted({d["stmt"] for n, d in g.nodes(data=True) if d["stmt"] is not None and (
        d["stmt"] not in known or d["stmt"] in mine and info.share_axis in
        ir.type_of(g, n).axes)}))
    groups, moved = [], ()
    for k in base.kernels:
        if k not in split:
            groups.append(Group(k.equations, k.recomputed))
            continue
        if new:
            groups.append(Group(new))
            new, moved = (), new
        # what the kernel recomputed for its reductions alone is the partial kernel's now
        own = set(k.equations) - set(k.recomputed) - set(new) - set(moved)
        kept = _read_by(g, own, set(k.recomputed)) - set(new) - set(moved)
        groups.append(Group(tuple(s for s in k.equations if s in own or s in kept),
                            tuple(s for s in k.recomputed if s in kept)))
    return _Like(tuple(groups))


def _read_by(g, stmts: set, recomputed: set) -> set:
    """Of `recomputed`, the statements `stmts` read, directly or through each other."""
    out: set = set()
    reading = set(stmts)
    while reading:
        found = {g.nodes[u]["stmt"] for n, d in g.nodes(data=True) if d["stmt"] in reading
                 for u in ir.operands(g, n)} & recomputed
        reading = found - out
        out |= found
    return out


def changed(base, fused) -> tuple[tuple, tuple]:
    """(the base's kernels the split replaced, the split fusion's kernels in their place)."""
    old = _split(base, fused.problem.graph.graph["split"])

    def key(k):
        return frozenset(k.equations), frozenset(k.recomputed)
    kept = {key(k) for k in base.kernels if k not in old}
    return old, tuple(k for k in fused.kernels if key(k) not in kept)


def decided(base, fused):
    """The split fusion with the base's 16-bit storage decision (stored16.py) carried over
    (Fused.stored16: made once, for the base's kernels; the split's own arrays are not
    stored in 16 bits), where the base has one."""
    if base.stored16 is None:
        return fused
    from dataclasses import replace
    from . import stored16
    from .kernel_plan import KernelPlanner
    pr, planner, g = fused.problem, fused.planner, fused.problem.graph
    was = base.stored16.problem.graph
    chosen = {v: d for v, d in stored16.decided(was).items() if v in g}
    g2 = stored16.with_decision(g, chosen, stored16.cotangents_decided(was) & set(g))
    planner2 = KernelPlanner(g2, pr.target, pr.sizes, pr.hints, planner.engine,
                             across=planner.across, runnable=planner.runnable)
    return replace(fused, stored16=replace(fused, problem=replace(pr, graph=g2),
                                           planner=planner2))


def _split(base, info) -> tuple:
    """The base's kernels that the split cuts: those holding a statement it merges in."""
    merges = {merge for _, merge in info.apart}
    return tuple(k for k in base.kernels if merges & set(k.equations))


def estimated(fused, kernels) -> float:
    """The quick estimates' time of these kernels of a fusion (inf where one has none), on
    its 16-bit storage decision where it has one."""
    times = [(fused.stored16 or fused).planner.estimate(k) for k in kernels]
    return float("inf") if any(t is None for t in times) else \
        sum(float(t.cost.time) for t in times)


def final_of(fused, kernels, split) -> float:
    """These kernels' time by their final plans, a split's merge where it runs fastest
    (`split`: its SplitChoice or SplitInfo; splitting.final); inf where one has no plan."""
    from .last_block import decide
    plans = [fused.planner.plan(k, strict=False) for k in kernels]
    if any(p is None for p in plans):
        return float("inf")
    problem = fused.problem
    plans, _ = decide(problem.graph, tuple(plans), split, problem.sizes, problem.target, "auto")
    return sum(p.cost.time for p in plans)


def best(problem, fuse, base, split_problem) -> list:
    """[(the fusion with one more kernel split, its axis, its count, its Alone), ...]: the
    best split of a kernel, then, on the plan it makes, the best of the other axes that gained
    in the first round, each priced again from the count that gained most there and its
    neighbours (_walk), and so on (greedily: QK-norm attention's gradient splits `dgq` over
    t, then `dgk` over s); [] where
    none is predicted faster. Each by the quick estimates of the kernels it changes, then by
    their final plans (each split's merge where it runs fastest, last_block.decide)."""
    rounds: list = []
    named = {frozenset(k.equations): k.name for k in base.kernels}    # (the unsplit plan's)
    found, gains = _one(problem, fuse, base, split_problem, None, named)
    while found is not None:
        rounds.append(found)
        fused, axis = found[0], found[1]
        gains.pop(axis, None)
        if not gains:
            break
        found, _ = _one(fused.problem, fuse, fused, split_problem, gains, named)
    return rounds


def _one(problem, fuse, base, split_problem, only, named):
    """(the best split of one kernel of `base` or None, {axis: its best count that gained});
    `only`: {axis: the count that gained most in the first round} for the later rounds, which
    price that count and its neighbours, then the best one's until both of its neighbours
    are priced (the first round prices every count); `named`: the unsplit plan's kernel names
    by their statements, for explain."""
    found, gains = None, {}
    for axis, within in candidates(base).items():
        if only is not None and axis not in only:
            continue
        options = counts(problem.sizes[axis])
        priced: dict[int, float] = {}
        for parts in _walk(options, only and only[axis], priced):
            pr = split_problem(problem, axis, parts, within=within)
            fused = decided(base, fuse(pr, regrouped(base, pr)))
            old, new = changed(base, fused)
            priced[parts] = gain = estimated(base, old) - estimated(fused, new)
            if gain > gains.get(axis, (0.0, 0))[0]:
                gains[axis] = (gain, parts)
            if gain > 0 and (found is None or gain > found[0]):
                found = (gain, fused, axis, parts, old, new)
    gains = {a: parts for a, (_, parts) in gains.items()}
    if found is None:
        return None, gains
    gain, fused, axis, parts, old, new = found
    info = fused.problem.graph.graph["split"]
    before = final_of(base.stored16 or base, old, None)
    after = final_of(fused.stored16 or fused, new, info)
    if before <= after:
        return None, gains
    return (fused, axis, parts, alone(base, info, old, before, after, named)), gains


def _walk(options: list, start, priced: dict):
    """The counts to price: every one of `options` without `start`; with it, `start` and
    then the unpriced neighbours (half, twice) of the best priced so far, until it has none
    (`priced`: {count: gain}, filled by the caller as each is priced)."""
    if not start:
        yield from options
        return
    yield start
    while True:
        here = max(priced, key=lambda p: (priced[p], -p))
        nxt = [p for p in (here // 2, here * 2) if p in options and p not in priced]
        if not nxt:
            return
        yield from nxt


def alone(base, info, old, before: float, after: float, named) -> "Alone":
    """What explain says of a split of `base`'s kernels `old` alone (`info`: its SplitInfo;
    `before`, `after`: their final plans' time unsplit and split)."""
    g = base.problem.graph
    merges = {merge for _, merge in info.apart}
    names = tuple(e.name for e in g.graph["equations"] if e.stmt in merges)
    busy = min(float((base.stored16 or base).planner.plan(k, strict=False).cost.utilization)
               for k in old)
    kernels = tuple(named.get(frozenset(k.equations), k.name) for k in old)
    return Alone(names, kernels, busy, before, after)


@dataclass(frozen=True)
class Alone:
    """A split of some kernels of the plan alone (SplitChoice.alone, for explain)."""
    arrays: tuple[str, ...]      # the statements whose reductions split (equations' names)
    kernels: tuple[str, ...]     # the unsplit plan's kernels they were
    busy: float                  # the least of those kernels' share of the GPU busy (final)
    unsplit: float               # their final plans' time, seconds
    split: float                 # the partial and merge kernels' (the merge where fastest)


__all__ = ["candidates", "counts", "regrouped", "changed", "best", "Group"]
