"""A split's merge in the partial kernel itself: the last block of each output tile merges it.

A split plan (`split.py`) stores each split's partial state and merges them in a kernel of
its own. The merge can instead run in the partial kernel: each block, after storing its
partial states, makes them visible (`__threadfence`) and counts itself in a counter of its
output tile (one `int` per tile, in global memory, zero before the launch); the block that
brings the count to the number of blocks per tile (the splits the tile's blocks cover) runs
the merge kernel's block for that tile, then sets the counter back to zero for the next
launch (as CUDA's threadFenceReduction sample, FlashAttention's split-KV and CUTLASS's
serial split-K do). No launch, and the partial states are read while they are in L2.

The merge kernel keeps its own plan (its model, tile search and Schedule), with two rules
that tie it to the partial kernel's blocks: its block tile is the partial kernel's output
tile (the partial kernel's group along every axis both weave, the whole axis along an axis
the partial kernel holds whole), and it has no more threads than the partial kernel
launches. A merge kernel qualifies when it runs on the CUDA cores, merges over the split's
part axis, loads nothing but the partial kernel's stores and the diagram's inputs, and reads
what it computes from the partial states only at its own output tile's positions along every
axis the partial kernel's blocks cut (`_crossing`: a gather at computed positions, a renaming,
a scan or a softmax along such an axis would read another tile's partial states, which its
last block may not have stored yet).

`decide(...)` is the decision, made once in stage `tile`, for every split of the plan in the
order made (a plan of per-kernel splits, kernel_split.py, has one per split kernel, each its
own partial kernel, merges and counters; a kernel runs the tail of one split at most):
`"kernel"` keeps the merge kernels, `"last-block"` asks for the tails (N0607 when a merge
cannot run there), `"auto"` takes each where the model predicts it faster. The merge kernels
stay in `Plan.kernels` (the interpreter runs them after the partial kernel, explain prints
them); `Plan.tails` says which of them each partial kernel runs instead of a launch, and the
lowering (`codegen/tail.py`) reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..diagrams.diagnostics import NapkinError, error, one_of
from . import ir
from . import schedule as schedules
from .graph import descendants
from .cost import LAUNCH_SECONDS, evaluate
from .kernel_plan import KernelPlan, kernel_plan
from .search import search

MODES = ("auto", "kernel", "last-block")

# What the tail adds: before the last tile's merge can start, its last block's stores are
# made visible and its counter incremented (a fence and an atomic's round trip to L2). An
# assumption of the model (about a microsecond on Ampere and Hopper), to calibrate on a GPU.
FENCE_SECONDS = 1e-6
FLAG_BYTES = 16


@dataclass(frozen=True)
class Tail:
    """The partial kernel that runs the merges, the merge kernels it runs (plan.kernels
    indices, in order), its output-tile axes (the counter's index) and the blocks per tile."""
    partial: int
    merges: tuple[int, ...]
    axes: tuple[str, ...]       # the partial kernel's woven axes but the part axis
    blocks: int                 # blocks of the partial kernel per output tile
    forced: bool                # asked for (`--merge last-block`), not chosen
    saved: float                # predicted seconds the tail saves over the merge kernels
    axis: str = ""              # the split's axis (SplitInfo.axis: which split it merges)


def check_mode(mode: str) -> str:
    return one_of(mode, MODES, "merge")


def decide(g, plans: tuple[KernelPlan, ...], split, sizes: dict, target,
           mode: str = "auto") -> tuple[tuple[KernelPlan, ...], tuple[Tail, ...]]:
    """The plans (the merge kernels replanned for the tails taken) and the Tails, one per
    split whose merge runs in its partial kernel's last blocks, in the order the splits were
    made (`split`: a SplitChoice or SplitInfo, each of `split.each()`; None: no split)."""
    check_mode(mode)
    if split is None and mode == "last-block":
        raise error("N0607", "`--merge last-block` has nothing to merge: the plan splits no "
                    "reduction across blocks", help="ask for a split too (`--split x=8`, "
                    "split={'x': 8} in napkin.compile), or leave the merge to the planner "
                    "(`--merge auto`)")
    if split is None or mode == "kernel":
        return plans, ()
    tails: list[Tail] = []
    for one in split.each():
        plans, tail = _decide_one(g, plans, one, sizes, target, mode, tails)
        if tail is not None:
            tails.append(tail)
    return plans, tuple(tails)


def _decide_one(g, plans, split, sizes, target, mode, taken: list):
    """(the plans, the Tail or None) for one split; `taken`: the tails decided before it."""
    found = _tail(g, plans, split, sizes, target)
    busy = {i for t in taken for i in (t.partial, *t.merges)}
    if not isinstance(found, str) and (found[0] in busy or busy & set(found[1])):
        found = "its kernels already run another split's merge in their last blocks"
    if isinstance(found, str):
        if mode == "last-block":
            raise error("N0607", f"the split of `{split.axis}` cannot merge in the last block: "
                        f"{found}", help="merge in a kernel of its own (`--merge kernel`, the "
                        "default when the planner finds no gain)")
        return plans, None
    partial, replanned, costed = found
    first = min(replanned)         # the tail's fence and counter, charged to its first merge
    replanned[first] = replace(replanned[first], cost=replace(
        replanned[first].cost, time=replanned[first].cost.time + FENCE_SECONDS))
    p = plans[partial]
    before = p.cost.time + sum(plans[i].cost.time for i in replanned)
    after = costed.cost.time + sum(kp.cost.time for kp in replanned.values())
    if mode == "auto" and after >= before:
        return plans, None
    merges = tuple(sorted(replanned))
    replanned[partial] = costed        # (its blocks hold the merges' shared buffers too)
    out = tuple(replanned.get(i, kp) for i, kp in enumerate(plans))
    tile = p.schedule.block_tile()
    axes = tuple(a for a in tile if a != split.part_axis)
    return out, Tail(partial, merges, axes, -(-split.parts // tile[split.part_axis]),
                     mode == "last-block", before - after, split.axis)


def _tail(g, plans, split, sizes, target):
    """(the partial kernel's index, {merge index: its plan for the tail}, the partial
    kernel's plan costed with the merges in its blocks) or why not."""
    part = split.part_axis
    partials = {g.graph["arrays"][name] for name in split.partials}
    writers = [i for i, kp in enumerate(plans) if partials & set(kp.kernel.stores)]
    if len(writers) != 1:
        return "its partial states are stored by more than one kernel"
    i = writers[0]
    p = plans[i]
    if not target.processors:
        return "the target has no blocks (a model without a grid)"
    if part not in p.schedule.block_tile():
        return f"kernel {p.kernel.name} does not group its blocks by the splits"
    inputs = set(g.graph["inputs"].values())
    mine = set(p.kernel.stores)
    merges = [j for j, kp in enumerate(plans) if set(kp.kernel.loads) & partials]
    if any(j < i for j in merges):
        return "a merge kernel launches before the partial kernel"
    replanned = {}
    for j in merges:
        m = plans[j]
        if part not in m.kernel.reduced(g):
            return f"kernel {m.kernel.name} reads the partial states without merging them"
        if not set(m.kernel.loads) <= mine | inputs:
            return f"kernel {m.kernel.name} also reads what another kernel stores"
        found = _merge_plan(g, p, m, part, sizes, target)
        if isinstance(found, str):
            return f"kernel {m.kernel.name}: {found}"
        replanned[j] = found
    if not replanned:
        return "no kernel merges its partial states"
    # the merges' shared buffers follow the partial kernel's, and ptxas gives the kernel the
    # registers of the hungrier part: where that lowers its blocks per SM, the partial
    # kernel is costed again as it would run (auto takes the tail only if still faster)
    extra = _shared(replanned.values())
    if p.cost.levels[1].M + extra > target.levels[1].capacity_bytes:
        return (f"the merges' shared memory ({extra:,.0f} bytes) does not fit beside kernel "
                f"{p.kernel.name}'s")
    regs = [kp.cost.registers for kp in replanned.values() if kp.cost.registers is not None]
    costed = evaluate(p.model, p.columns, p.choice, sizes, target,
                      beside=(extra, max(regs) if regs else None))
    return i, replanned, replace(p, cost=costed)


def _shared(merges) -> float:
    """Shared memory the tail adds to the partial kernel: the merges' buffers after its own,
    and the block's verdict (an int, its 16-byte-aligned slot)."""
    return sum(kp.cost.levels[1].M for kp in merges) + FLAG_BYTES


def _merge_plan(g, p: KernelPlan, m: KernelPlan, part: str, sizes: dict, target):
    """The merge kernel's plan with the partial kernel's output tile as its block tile and
    at most its threads, costed without a launch of its own (or why there is none)."""
    if m.schedule.engine != schedules.SIMT:
        return "it does not run on the CUDA cores"
    if m.hints:
        return "schedule hints fix its tiling"
    tile = p.schedule.block_tile()
    group = {}
    for a in m.model.woven:
        if a in tile:
            group[a] = min(tile[a], sizes[a])    # (a fragment's 16 rows over 4 heads: 4)
        elif any(a in ir.type_of(g, n).axes for n in p.kernel.stores):
            group[a] = sizes[a]            # not tiled: each block stores it whole (where its
                                           # stores have it: a row's logsumexp has no `d`)
        else:
            return f"its axis `{a}` is not one the partial kernel's blocks tile"
    if any(a not in group for a in tile if a != part):
        return "its blocks do not cover the partial kernel's output tiles"
    cut = {a for a in tile if a != part and tile[a] < sizes[a]}
    crossing = _crossing(g, m, set(p.kernel.stores), cut)
    if crossing:
        return crossing
    fixed = {"group": group, "threads": p.schedule.threads}
    found = search(m.model, m.columns, target, sizes, fixed)
    if found is None:
        return f"no tiling of it fits {p.schedule.threads} threads and the output tile"
    choice, cost = found
    cost = replace(cost, time=cost.time - LAUNCH_SECONDS)
    try:
        return kernel_plan(g, m.kernel, m.model, m.columns, choice, cost, m.hints, sizes, target)
    except NapkinError as exc:       # a tiling the schedule's rules refuse (N0604)
        return f"its tiling within the output tile is not legal ({exc.diagnostics[0].message})"


def _crossing(g, m: KernelPlan, stores: set, cut: set) -> str | None:
    """Why the merge kernel `m` would read the partial kernel's `stores` (or a value computed
    from them) outside its own output tile along an axis of `cut` (the axes the partial
    kernel's blocks tile but do not hold whole), or None: each block merges when the blocks
    of its own tile are done, not the others' (fuzz seed 46: `E4[i] = E2[size(i) - 1 - i]`
    after the merge read other tiles' partial states before they were stored)."""
    if not cut:
        return None
    mine = set(m.kernel.nodes)
    reached = set().union(*(descendants(g, s) for s in stores)) & mine
    for n in sorted(reached):
        op = ir.op(g, n)
        if isinstance(op, (ir.Gather, ir.View)):
            src = ir.type_of(g, ir.operands(g, n)[0]).axes
            moved = [a for a, label in zip(src, op.labels) if a in cut and label != a]
        elif isinstance(op, ir.Reshape):
            moved = [a for a in ir.type_of(g, ir.operands(g, n)[0]).axes if a in cut]
        elif isinstance(op, (ir.Scan, ir.Softmax, ir.Reduce, ir.Contract)):
            moved = [a for a in op.axes if a in cut]
        else:
            continue
        if moved:
            return (f"it reads the partial states across its output tiles along `{moved[0]}` "
                    f"(a {type(op).__name__.lower()}), which other blocks may not have stored")
    return None
