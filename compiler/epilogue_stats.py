"""A product's row statistics in its epilogue: the fused plan of an LM head and its
cross-entropy, priced where the plan does not run it (the planner lowers it where it splits
the columns so that a block holds a share whole: compiler/colstats.py).

    Z[t v] = H * W                                  (kernel A: tensor cores, streams m)
    L[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))    (kernel B: streams v)

Fusion keeps Z in global memory: the only fused kernel the planner knows streams v on the
CUDA cores. What users hand-write instead (Liger's fused linear cross-entropy) keeps the
logits on chip: each block computes its `g_t x g_v` tile of Z as kernel A does (m streamed
through shared memory, the same tiles, the same traffic of H and W) and, in the epilogue,
reduces the tile over v into per-row partial states (a running maximum and sum of exp; the
label's logit, 0 where the label falls outside the tile); the `P = ceil(v / g_v)` partial
states of a row merge as a split of v does (docs/splits.md: logsumexp[p_v], sum[p_v]).

`candidate` prices that plan with the cost model's own terms: kernel A's model at its own
tiling (tiles, pipeline, occupancy, L2 and HBM traffic of H and W) with its store of Z
replaced by the partial states ([t] x P x one f32 per statistic) and kernel B's per-element
work (the exponentials, maxima, compares, sums over v) added to its epilogue; the merge is
kernel B's own plan over P positions of those states. Blocks that loop over all of v instead
(no merge) would run `t / g_t` blocks only (16 at t=4096 in 256-row tiles, for 132 SMs on
an h100), so the split form is the one priced.

A candidate is: kernel A a tensor-core product (tensorcore.Site, its epilogue elementwise)
storing one array C over (row, col) that kernel B alone reads; kernel B streaming col, every
reduction in it a mergeable one over col (logsumexp, max, min, sum) and every array it stores
without col. explain reports it after the plan's total (`for_plan`, `lines`) where the plan
does not run it (no kernel of the plan is a colstats one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import column_epilogue, ir
from .cost import evaluate
from .kernels import FusedKernel
from .model import Array, array_name

MERGEABLE = ("logsumexp", "max", "min", "sum")
STATE_BYTES = column_epilogue.STATE_BYTES     # one f32 per statistic per row per tile of col


@dataclass(frozen=True)
class Candidate:
    """The fused plan's figures (seconds, model) beside the two kernels it replaces."""
    row: str
    col: str
    tile: tuple[int, int]        # the block's tile of (row, col): kernel A's
    parts: int                   # P = ceil(size(col) / tile of col): partial states per row
    statistics: int              # the partial states of a row in one tile (one f32 each)
    fused: float                 # the product with its epilogue statistics
    merge: float                 # the merge of the partial states (kernel B's plan over P)
    apart: float                 # kernel A + kernel B as planned
    state_bytes: int             # the partial states in global memory

    @property
    def time(self) -> float:
        return self.fused + self.merge


def statistics(g, kb: FusedKernel, stored: int, col: str) -> tuple[int, ...] | None:
    """Kernel B's reductions over `col` of the product `stored`, or None where kernel B is not
    row statistics of it alone (another reduction, a softmax, a store along `col`)."""
    if stored not in kb.loads:
        return None
    found = []
    for n in kb.nodes:
        op = ir.op(g, n)
        if isinstance(op, (ir.Softmax, ir.Contract)):
            return None
        if isinstance(op, ir.Reduce):
            if tuple(op.axes) != (col,) or op.fn not in MERGEABLE:
                return None
            found.append(n)
    if not found or any(col in ir.type_of(g, n).axes for n in kb.stores):
        return None
    return tuple(found)


def candidate(g, planner, ka: FusedKernel, kb: FusedKernel) -> Candidate | str | None:
    """The fused plan of kernels A and B priced (module docstring); why not where kernel B is
    statistics of kernel A's product (`_pair`) that cannot fuse so; None where it is not."""
    from .tensorcore import Site, best_site, site
    if len(ka.stores) != 1 or not _pair(g, next(iter(ka.stores)), kb):
        return None
    (stored,) = ka.stores
    name = f"`{array_name(g, stored)}`"
    if any(n not in kb.nodes for n in g.successors(stored)):
        return f"{name} is an output or another kernel reads it (stored all the same)"
    pa, pb = planner.plan(ka, strict=False), planner.plan(kb, strict=False)
    if pa is None or pb is None:
        return "no plan of the product or of its statistics alone"
    found = site(g, ka, pa.model, planner.target, planner.sizes)
    if not pa.choice.warps or not isinstance(found, Site):
        why = best_site(g, ka, planner.target, planner.sizes)     # (explain_engine's words)
        return f"{name} is computed on the CUDA cores: " + (
            why if isinstance(why, str) else "predicted faster there at these sizes")
    if pa.choice.instruction != "mma.sync" or found.batch or pa.choice.split:
        return (f"{name}'s product runs with batch axes, a split or wgmma: the epilogue "
                "holds row statistics on mma.sync alone (colstats.py)")
    row, col = found.row, found.col
    if pb.model.streaming.axis != col:
        return f"the statistics of {name} do not stream its columns `{col}`"
    stats = statistics(g, kb, stored, col)
    if stats is None or set(ir.type_of(g, stored).axes) != {row, col}:
        return (f"the statistics of {name} are not {', '.join(MERGEABLE)} over its columns "
                "alone, or it stores a value along them")
    sizes = planner.sizes
    tile = {row: sizes[row], col: sizes[col], **dict(pa.choice.group)}
    parts = -(-sizes[col] // tile[col])
    states = Array(stored, "partial states", "store", (row,), STATE_BYTES * len(stats) * parts)
    arrays = tuple(a for a in pa.model.arrays if not (a.role == "store" and a.node == stored))
    epilogue = tuple(w for w in pb.model.work if col in w.axes)
    # the epilogue after the product's loop priced as the planner prices it (column_epilogue)
    columns = column_epilogue.columns(g, row, col, stats)
    fused = evaluate(replace(pa.model, arrays=arrays + (states,), columns=columns,
                             work=pa.model.work + epilogue), pa.columns, pa.choice, sizes,
                     planner.target)
    # the merge: kernel B's plan over P positions of the states (one f32 each) per row
    merging = tuple(replace(a, bytes=STATE_BYTES * len(stats)) if a.node == stored else a
                    for a in pb.model.arrays)
    merge = evaluate(replace(pb.model, arrays=merging), pb.columns, pb.choice,
                     {**sizes, col: parts}, planner.target)
    if fused is None or merge is None:
        return None
    return Candidate(row, col, (tile[row], tile[col]), parts, len(stats), float(fused.time),
                     float(merge.time), float(pa.cost.time + pb.cost.time),
                     STATE_BYTES * len(stats) * parts * sizes[row])


def _stats_after_product(g, kernels) -> bool:
    """Whether a kernel stores a product that a kernel of statistics alone reduces (`_pair`:
    the cheap test before fusing the problem again: explain on other diagrams pays nothing)."""
    return any(_pair(g, s, kb) for ka in kernels for s in ka.stores for kb in kernels
               if any(isinstance(ir.op(g, n), ir.Contract) for n in ka.nodes))


def _pair(g, stored: int, kb: FusedKernel) -> bool:
    """Whether kernel B reads `stored` and reduces along one of its axes with statistics alone
    (MERGEABLE; no product, no softmax)."""
    if stored not in kb.loads:
        return False
    axes = set(ir.type_of(g, stored).axes)
    ops = [ir.op(g, n) for n in kb.nodes]
    return not any(isinstance(op, (ir.Contract, ir.Softmax)) for op in ops) and any(
        isinstance(op, ir.Reduce) and op.fn in MERGEABLE and len(op.axes) == 1 and
        op.axes[0] in axes for op in ops)


def for_plan(plan) -> dict | None:
    """The fused plan priced against `plan` (explain's `epilogue_statistics`): the problem
    fused again without a split (the product and its statistics are kernels of their own
    there), each pair of a product's kernel and the kernel of its row statistics priced as
    one (`candidate`), the rest of that layout as planned; None where there is no such pair."""
    from .kernel_plan import KernelPlanner
    from .plan import _fused_kernels, prepare
    if not plan.target.processors or not _stats_after_product(
            plan.graph, [kp.kernel for kp in plan.kernels]) or any(
            getattr(kp.schedule.site, "columns", ()) for kp in plan.kernels):
        return None         # (none, or the plan runs it: compiler/colstats.py)
    shape = {a: plan.sizes[a] for a in plan.diagram.axes if a in plan.sizes}
    pr = prepare(plan.diagram, plan.target, shape)
    planner = KernelPlanner(pr.graph, pr.target, pr.sizes, pr.hints, plan.engine)
    kernels = _fused_kernels(pr, planner)[0]
    why = None
    for ka in kernels:
        for kb in kernels:
            found = candidate(pr.graph, planner, ka, kb) if ka is not kb else None
            names = [array_name(pr.graph, n) for n in (*ka.stores, *kb.stores)]
            if isinstance(found, str) and any(     # (said where a logsumexp, max or min is)
                    isinstance(ir.op(pr.graph, n), ir.Reduce) and
                    ir.op(pr.graph, n).fn != "sum" for n in kb.nodes):
                why = why or {"arrays": names, "why_not": found}
            if found is None or isinstance(found, str):
                continue
            total = float(plan.time) - _computing(plan, names) + found.time
            return {"arrays": names, "row": found.row, "col": found.col,
                    "tile": list(found.tile), "parts": found.parts,
                    "statistics": found.statistics, "state_bytes": found.state_bytes,
                    "fused_seconds": found.fused, "merge_seconds": found.merge,
                    "apart_seconds": found.apart, "predicted_seconds": total,
                    "plan_seconds": float(plan.time), "lowered": False}
    return why


def lines(rep: dict, fmt) -> list[str]:
    """explain's words for `for_plan`'s report (`fmt`: seconds to text); none for None."""
    if not rep:
        return []
    both = " and ".join(rep["arrays"])
    if "why_not" in rep:
        return [f"not fused: {both} in one kernel, a matmul with row statistics in its "
                f"epilogue: {rep['why_not']}"]
    verdict = "faster" if rep["predicted_seconds"] < rep["plan_seconds"] else "slower"
    return [f"not chosen: {both} in one kernel, a matmul with row statistics in its epilogue "
            f"(each {rep['tile'][0]} x {rep['tile'][1]} tile of the product reduced over "
            f"`{rep['col']}` on chip into {rep['statistics']} partial state(s) per row; "
            f"{rep['parts']} per row merged like a split of `{rep['col']}`, "
            f"{rep['state_bytes']:,} bytes in global memory, no {rep['row']} x {rep['col']} "
            "buffer)",
            f"  predicted {fmt(rep['fused_seconds'])} + {fmt(rep['merge_seconds'])} for the "
            f"merge instead of {fmt(rep['apart_seconds'])} for {both} in kernels of their "
            f"own (unsplit): {fmt(rep['predicted_seconds'])} in all, {verdict} than this plan"]


def _computing(plan, names) -> float:
    """The predicted seconds of the plan's kernels computing the equations `names` (a split's
    partial side `Z.part` counts as `Z`; a merge in the partial kernel's last blocks adds
    nothing of its own)."""
    eqs = {e.stmt: e.name.split(".")[0] for e in plan.graph.graph["equations"]}
    tail = {i for t in plan.tails for i in t.merges}
    return sum(float(kp.cost.time) for i, kp in enumerate(plan.kernels)
               if any(eqs.get(s) in names for s in kp.kernel.equations) and i not in tail)


__all__ = ["Candidate", "candidate", "for_plan", "lines", "statistics"]
