"""Which reduced axis to split across blocks, and into how many splits (part of stage `fuse`).

A plan whose kernels leave SMs idle (decode attention: one query row per head;
a long reduction at batch 1; a skinny matrix product) can group a reduced axis
across blocks (`split.py`): each block streams its share through the
accumulator and a merge kernel combines the partial states. The candidates
are the reduced axes that merge, of the kernels the model predicts under-fill
the GPU (or of every kernel when the outputs are few), at least `LONG` positions long (or
4 x `MIN_SHARE` in a kernel whose blocks fill at most 1 / `SPARSE` of the GPU's block
slots, or of a plan whose outputs are few), split into a power of two of parts (at least `MIN_SHARE` positions per
split, at most `MAX_PARTS` splits): the counts of `COARSE`, the one that would
fill the GPU's block slots, then the best one's two neighbours (a product's columns for its
row statistics, colstats.wide_columns: also the counts whose shares fill a tile, however many). Each is fused
and priced by the same quick estimates fusion uses (the partial states'
traffic and the merge kernel included), and the fastest plan wins, unsplit
included; a split so chosen is kept only when the final plans (the full search, the merge
where it runs fastest) agree that it is faster than the unsplit kernels. A hint (`split x by 8`,
`--split x=8`, `split={"x": 8}`) fixes the split instead; `split x by 1` keeps the plan unsplit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..diagrams.diagnostics import error
from . import colstats, ir, kernel_split, named_split, packing
from . import split as splits

UNDERFILLED = 0.75     # a kernel busy below this fraction of the GPU invites a split,
FEW_OUTPUTS = 1024     # and so do outputs of at most this many values per SM (a plan may
                       # keep SMs busy without a split by re-reading its inputs)
MIN_SHARE = 32         # positions of the split axis per split, at least
LONG = 4096            # the planner splits reductions at least this long (hints: any); the
                       # library at its default sizes (1024) prices no split
SPARSE = 8             # ... and any reduction of at least 4 x MIN_SHARE positions in a kernel
                       # whose blocks fill at most 1 / SPARSE of the GPU's block slots
                       # (attention at b = 1, h = 8, q = 16, x = 2048: 8 blocks, 19 us
                       # unsplit, 7.8 us with x in 16 parts; the library's default sizes
                       # fill the GPU and price no split), or in any kernel of a plan whose
                       # outputs are few (FEW_OUTPUTS: at q = 4 and 8 the softmax-product
                       # kernel's 256 blocks are not sparse; unsplit, 11.6 and 13.7 us,
                       # above q = 16's 7.8; split, 7.6 us)
MAX_PARTS = 256
COARSE = (4, 16, 64, 256)   # split counts priced first; the best one's neighbours next
NEAR = 0.02           # a neighbour of the best count this close by the quick estimates is
                      # compared by its final plans too (their merge where it runs fastest:
                      # MHA decode b=1 h=32 q=1 x=1024 d=128 with its logsumexp, h100, 8
                      # splits by the quick estimates at 11.46 us, 4 at 11.56 whose merge runs
                      # in the last block: 11.05 us by the final plans)
MIN_GAIN = 0.02        # an axis is tried when the kernels asking for its split take at least
                       # this share of the plan's time (paged_attention's gradient: 1e-5,
                       # 11 s of planning, most of it fusing split candidates)


@dataclass(frozen=True)
class SplitChoice:
    """The split a plan runs with, and what it gained (quick estimates, for explain)."""
    axis: str
    parts: int
    part_axis: str
    share_axis: str
    share: int                   # positions per split at the planning size
    partials: tuple[str, ...]    # the partial-state arrays
    forced: bool                 # given by a hint, not chosen
    time: float                  # predicted (quick estimates) with the split
    unsplit_time: float | None   # the best unsplit plan's, when it has one
    alone: "kernel_split.Alone | None" = None   # a split of some kernels alone: which, why
    more: tuple = ()             # further splits of other kernels alone (SplitChoice each)

    def each(self) -> tuple:
        """This split and the further ones (kernel_split.best: each its own axis)."""
        return (self,) + self.more


def split_problem(problem, axis: str, parts: int, span=None, within=None):
    """The problem with `axis` split in `parts` (in the statements `within` alone: one
    kernel's, kernel_split.py) (a NapkinError N0607 when it cannot be)."""
    try:
        g = splits.split(problem.graph, axis, parts, within)
    except splits.NotSplittable as exc:
        raise splits.refuse(axis, str(exc), span) from None
    info = g.graph["split"]
    hints = tuple(replace(h, axis=info.share_axis) if h.kind == "stream" and h.axis == axis
                  else h for h in problem.hints)
    return replace(problem, graph=g, sizes=splits.complete_sizes(g, problem.sizes), hints=hints)


def total(fused) -> float:
    """A fusion's predicted time, on the 16-bit storage decision fusion made on its kernels
    where it made one (Fused.stored16: what tiling will price)."""
    planner = (fused.stored16 or fused).planner
    times = [planner.estimate(k) for k in fused.kernels]
    return float("inf") if any(t is None for t in times) else sum(t.cost.time for t in times)


def candidates(fused) -> dict[str, int]:
    """Reduced axes of under-filled kernels that split, each with the split count a search
    starts from: the power of two nearest half what fills the GPU's block slots (the
    kernel's blocks times the splits against SMs times the blocks an SM holds)."""
    problem, planner = fused.problem, fused.planner
    if not problem.target.processors:
        return {}
    g = problem.graph
    outputs = 0
    for n in g.graph["outputs"].values():
        count = 1
        for a in ir.type_of(g, n).axes:
            count *= problem.sizes[a]
        outputs += count
    few = outputs <= problem.target.processors * FEW_OUTPUTS
    out: dict[str, int] = {}
    nominated: dict[str, float] = {}    # axis -> the time of the kernels that ask for it
    whole = 0.0
    for k in fused.kernels:
        est = planner.estimate(k)
        if est is None:
            continue
        whole += float(est.cost.time)
        group = dict(est.choice.group)
        blocks = 1
        sizes = packing.sized(est.model.packed, problem.sizes)    # (packed rows: one axis)
        for a in est.model.woven:
            blocks *= -(-sizes[a] // group.get(a, sizes[a]))
        slots = problem.target.processors * max(1, int(est.cost.blocks_per_sm))
        # busy by the model, but in less than one wave of its block slots: small blocks
        # that a split of the reduction could make larger (issue 13's latency hiding by a
        # cp.async pipeline's bytes in flight lets a 2-warp block keep an SM busy)
        if est.cost.utilization >= UNDERFILLED and not few and blocks >= slots:
            continue
        start = 2
        while start * 2 * blocks * 2 <= slots:
            start *= 2
        long = LONG if blocks * SPARSE > slots and not few else 4 * MIN_SHARE
        for a in k.reduced(g):
            if a in g.graph["axes"] and a not in out and splits.splittable(g, a) is None \
                    and problem.sizes[a] >= long:
                out[a] = min(start, _most(problem.sizes[a]))
            if a in out:
                nominated[a] = nominated.get(a, 0.0) + float(est.cost.time)
    # a product's columns reduced by row statistics in a kernel of their own: split, a block
    # holds its share whole and reduces it in the product's epilogue (colstats.py), Z unstored
    for a, asking in sorted(colstats.wide_columns(g, fused.kernels, problem.sizes).items()):
        if a in g.graph["axes"] and a not in out and splits.splittable(g, a) is None:
            out[a] = _most(problem.sizes[a])
            nominated[a] = sum(float(e.cost.time) for e in map(planner.estimate, set(asking))
                               if e is not None)
    # a split fills the SMs of the kernels that ask for it: where they take a sliver of the
    # plan's time it cannot gain more, and pricing it fuses the whole diagram three times
    return {a: n for a, n in out.items() if nominated[a] >= MIN_GAIN * whole}


def _most(size: int) -> int:
    parts = 2
    while parts * 2 <= MAX_PARTS and size >= parts * 2 * MIN_SHARE:
        parts *= 2
    return parts


def split_hints(problem):
    """(the problem without its split hints, those hints as (axis, parts, span, array):
    `array` names the kernel split alone (`--split dg:r=8`), None for the diagram's)."""
    forced = tuple((h.axis, _at_most(problem.sizes.get(h.axis), h.size),
                    h.info.span if h.info else None, h.array)
                   for h in problem.hints if h.kind == "split")
    return replace(problem, hints=tuple(h for h in problem.hints if h.kind != "split")), forced


def _at_most(size, parts: int) -> int:
    """A split count past the axis's size splits it into its positions, one per split (as a
    group past the size is the whole axis): `--split c=100000` of a 5-long `c` planned and
    interpreted 100000 blocks of nothing (40 s, and memory for each)."""
    return min(parts, size) if isinstance(size, int) and size >= 1 else parts


def forced_split(problem, forced):
    """The problem split as the split hints `forced` ((axis, parts, span, array)) say, None
    where they split nothing (none, `split x by 1`, or splits of kernels alone: their names
    checked here, kernel_split.hinted splits them); N0607 / N0201 where they cannot."""
    if any(f[3] is not None for f in forced):
        named_split.check(problem.graph, forced)
        return None
    if len(forced) > 1:
        raise error("N0607", "one split per diagram: the hints split "
                    + ", ".join(f"`{a}`" for a, *_ in forced), forced[1][2],
                    help="keep one split hint, or split kernels alone: --split ARRAY:AXIS=COUNT "
                         "for each (`--split dg:r=8`, the kernel computing dg)")
    if not forced:
        return None
    axis, parts, span, _ = forced[0]
    if axis not in problem.graph.graph["axes"]:
        raise error("N0201", f"split {axis}: the diagram has no axis `{axis}`", span)
    return None if parts == 1 else split_problem(problem, axis, parts, span)


def choose(problem, fuse, forced: tuple = ()):
    """(the fused kernels to plan, their SplitChoice or None). `fuse(problem)` is the fusion
    stage, `fuse(problem, like)` groups the statements as `like` does; `forced` are the
    split hints: (axis, parts, span, array)."""
    hinted = forced_split(problem, forced)
    if forced and forced[0][3] is not None:      # splits of kernels alone, as hinted
        base = fuse(problem)
        rounds = named_split.hinted(problem, fuse, base, split_problem, forced)
        return (base, None) if not rounds else _alone_choice(rounds, total(base), True)
    if forced:
        axis, parts, span, _ = forced[0]
        if hinted is None:              # `split x by 1`: one split is no split (and no search)
            return fuse(problem), None
        fused = fuse(hinted)
        unsplit = total(fuse(problem))          # what explain compares the split with
        return fused, _choice(fused, axis, parts, True,
                              unsplit if unsplit != float("inf") else None)
    base = fuse(problem)
    best_time, best_key = total(base), None
    unsplit = best_time
    lanes = {h.axis for h in problem.hints if h.kind == "lanes"}
    wide = colstats.wide_columns(problem.graph, base.kernels, problem.sizes)
    for axis, start in candidates(base).items():
        if axis in lanes:                  # (split over a block's lanes as a hint says)
            continue
        # the kernels fusion makes of the fewest and the most splits tried, priced at the
        # other counts (the statements are the same), then fused again at the best count;
        # each count's problem is split once and fused once (its planner, and so its
        # kernels' estimates, shared by the pricing and the fusion: plan.fuse_kernels)
        problems: dict[int, object] = {}
        fusions: dict[int, object] = {}

        def split_at(parts: int):
            if parts not in problems:
                problems[parts] = split_problem(problem, axis, parts)
            return problems[parts]

        def fused_at(parts: int):
            if parts not in fusions:
                fusions[parts] = fuse(split_at(parts))
            return fusions[parts]
        most = _most(problem.sizes[axis])
        coarse = sorted({min(start, most)} | {p for p in COARSE if p <= most} | (
            set(colstats.tile_counts(problem.sizes[axis])) if axis in wide else set()))
        templates = {fused_at(p).kernels: p for p in {coarse[0], coarse[-1]}}
        tried: dict[int, float] = {}

        def price(parts: int, own: bool = False) -> float:
            if parts not in tried:
                pr = split_at(parts)
                tried[parts] = min(total(fuse(pr, _Like(ks))) for ks in templates)
            if own:     # ... and by its own fusion (32 splits of MHA decode: 2 kernels)
                tried[parts] = min(tried[parts], total(fused_at(parts)))
            return tried[parts]
        here = min(coarse, key=price)
        for nxt in (here // 2, here * 2):          # then the neighbours of the best, each
            if 2 <= nxt <= most:                   # by its own grouping too
                price(nxt, own=True)
        here = min(tried, key=price)
        fused = fused_at(here)
        t = total(fused)
        if t < best_time * (1 - 1e-9):
            best_time, best_key = t, (axis, here)
            # the best count's neighbours within NEAR of it, their final plans compared below
            near = [(p, fused_at(p)) for p in sorted(tried) if p != here and
                    p in (here // 2, here * 2) and tried[p] <= tried[here] * (1 + NEAR)]
            near.insert(0, (here, fused))
    known = unsplit if unsplit != float("inf") else None
    wide = None
    if best_key is not None:
        finals = [(final(f, c), f, c) for f, c in
                  ((f, _choice(f, best_key[0], p, False, known)) for p, f in near)]
        t, f, c = min(finals, key=lambda o: o[0])
        if final(base, None) > t:
            wide = (f, c, t)
    # a split of the kernels asking for it alone (kernel_split.py: checked against the unsplit
    # plan by the final plans of the kernels it changes, the others' are the same), against
    # a split of the whole diagram by the final plans of both
    rounds = kernel_split.best(problem, fuse, base, split_problem)
    if rounds:
        fused, choice = _alone_choice(rounds, unsplit, False)
        if wide is None or final(fused, choice) < wide[2]:
            return fused, choice
    return (base, None) if wide is None else wide[:2]


def _alone_choice(rounds, unsplit, forced: bool):
    """(the fusion with every split of kernels alone, its SplitChoice): the first split's,
    with the others after it (SplitChoice.more), the whole plan's time."""
    choices = [replace(_choice(f, axis, parts, forced, None), alone=alone)
               for f, axis, parts, alone in rounds]
    fused = rounds[-1][0]
    return fused, replace(choices[0], more=tuple(choices[1:]), time=total(fused),
                          unsplit_time=unsplit if unsplit != float("inf") else None)


def final(fused, choice) -> float:
    """The fused kernels' time by their final plans (the full search fusion's quick estimates
    abbreviate: a reduction split over 8 lanes of a warp is one the quick search does not try,
    and it can beat a split across blocks), a split's merge where it runs fastest (last_block,
    as `--merge auto`); inf when a kernel has no plan. The final plans are memoised: the
    stage `tile` reads them again."""
    return kernel_split.final_of(fused, fused.kernels, choice)


@dataclass(frozen=True)
class _Like:
    """Another fusion's kernels, for `fuse(problem, like)`."""
    kernels: tuple


def _choice(fused, axis: str, parts: int, forced: bool, unsplit) -> SplitChoice:
    info = fused.problem.graph.graph["split"]
    return SplitChoice(axis, parts, info.part_axis, info.share_axis,
                       fused.problem.sizes[info.share_axis], info.partials, forced,
                       total(fused), unsplit)


__all__ = ["SplitChoice", "choose", "split_problem", "candidates", "total"]
