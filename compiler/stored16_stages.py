"""The 16-bit storage decision (stored16.py) in the planner's stages: fusion prices its
candidates on the decision anticipated as if every statement were a kernel, and tiling makes
it on the kernels fusion chose, undoing it for what a kernel off the tensor cores reads.
Errors are the caller's to point into the diagram (plan._in_diagram)."""

from __future__ import annotations

from dataclasses import replace

from . import schedule as schedules
from . import stored16
from .kernel_plan import KernelPlanner


def fusion_planner(pr, planner):
    """The planner fusion prices its candidates with: on the graph with the intermediates
    that will be stored in 16 bits anticipated (stored16.anticipated), else `planner`."""
    if planner.engine == "cuda-cores":
        return planner
    g = stored16.anticipated(pr.graph, pr.target)
    if g is pr.graph:
        return planner
    return KernelPlanner(g, pr.target, pr.sizes, pr.hints, planner.engine, across=planner.across)


def applied(fused):
    """The fused kernels with the intermediates only tensor-core products read stored in 16
    bits, on a copy of the graph and a planner of their own; tiled first, a kernel that reads
    one off the tensor cores undoes it for what it reads. Made once: a Fused that carries the
    decision fusion made on the same kernels (Fused.stored16) hands that on."""
    if fused.stored16 is not None:
        return replace(fused.stored16, split=fused.split)
    pr, planner = fused.problem, fused.planner
    if planner.engine == "cuda-cores":
        return fused
    g = pr.graph
    chosen = stored16.decide(g, fused.kernels, pr.target)
    while chosen:
        g2 = stored16.with_decision(g, chosen)
        planner2 = KernelPlanner(g2, pr.target, pr.sizes, pr.hints, planner.engine,
                                 across=planner.across)
        plans = [planner2.plan(k, strict=False) for k in fused.kernels]
        if any(p is None for p in plans):
            return fused
        dropped = stored16.fallen_back(g2, plans, schedules.TENSOR_ENGINES)
        if not dropped:
            return replace(fused, problem=replace(pr, graph=g2), planner=planner2)
        chosen = {v: d for v, d in chosen.items() if v not in dropped}
    return fused
