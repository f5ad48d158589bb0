"""The 16-bit storage decision (stored16.py) in the planner's stages: fusion prices its
candidates on the decision anticipated as if every statement were a kernel, and tiling makes
it on the kernels fusion chose, undoing it for what only kernels off the tensor cores read
into products; a
gradient's cotangents also read elementwise are added where the model predicts it faster.
Errors are the caller's to point into the diagram (plan.in_diagram)."""

from __future__ import annotations

from dataclasses import replace

from . import schedule as schedules
from . import stored16
from .canonical import through
from .cotangents import computed_from_cotangents, cotangent_inputs
from .kernel_plan import KernelPlanner


def fusion_planner(pr, planner):
    """The planner fusion prices its candidates with: on the graph with the intermediates
    that will be stored in 16 bits anticipated (stored16.anticipated), else `planner`."""
    if planner.engine == "cuda-cores":
        return planner
    g = stored16.anticipated(pr.graph, pr.target, _cotangents(pr))
    if g is pr.graph:
        return planner
    return KernelPlanner(g, pr.target, pr.sizes, pr.hints, planner.engine, across=planner.across,
                          runnable=planner.runnable, token=_token(planner, pr.graph, g))


def applied(fused):
    """The fused kernels with the intermediates only tensor-core products read stored in 16
    bits, on a copy of the graph and a planner of their own; tiled first, what only kernels
    off the tensor cores read into products is undone (stored16.fallen_back). A gradient's
    cotangents that a product reads qualify also where other kernels read them elementwise
    (stored16.decide), where the model predicts the kernels that store or load what that adds
    faster; else the decision without them. Made once: a Fused that carries the decision
    fusion made on the same kernels (Fused.stored16) hands that on."""
    if fused.stored16 is not None:
        return replace(fused.stored16, split=fused.split)
    pr, planner = fused.problem, fused.planner
    if planner.engine == "cuda-cores":
        return fused
    base = _settled(fused, stored16.decide(pr.graph, fused.kernels, pr.target), ())
    cot = _cotangents(pr)
    wider = cot and stored16.decide(pr.graph, fused.kernels, pr.target, cot)
    if wider and wider != (base[0] if base else {}):
        more = _settled(fused, wider, cot)
        if more and _faster(fused, more, base):
            base = more
    if base is None:
        return fused
    chosen, g2, planner2 = base
    return replace(fused, problem=replace(pr, graph=g2), planner=planner2)


def _cotangents(pr) -> frozenset:
    """The nodes computed from the gradient's cotangents (compiler/cotangents.py)."""
    return computed_from_cotangents(pr.graph, cotangent_inputs(pr.diagram))


def _settled(fused, chosen: dict, cot):
    """(decision, graph, planner) once no kernel reading a decided array off the tensor cores
    is left (it undoes what it reads, and the kernels are tiled again); None when nothing is
    left decided or a kernel finds no tiling."""
    pr, planner = fused.problem, fused.planner
    while chosen:
        g2 = stored16.with_decision(pr.graph, chosen, cot and stored16.read_elementwise(
            pr.graph, fused.kernels, chosen))
        planner2 = KernelPlanner(g2, pr.target, pr.sizes, pr.hints, planner.engine,
                                 across=planner.across, runnable=planner.runnable,
                                 token=_token(planner, pr.graph, g2))
        plans = [planner2.plan(k, strict=False) for k in fused.kernels]
        if any(p is None for p in plans):
            return None
        dropped = stored16.fallen_back(g2, plans, schedules.TENSOR_ENGINES)
        if not dropped:
            return chosen, g2, planner2
        chosen = {v: d for v, d in chosen.items() if v not in dropped}
    return None


def _token(planner, g, decided) -> int | None:
    """The token of `decided`, a with_decision copy of `g`, from that of `planner`'s graph
    where that is `g` (stored16.decision_token; None: the new planner freezes it)."""
    return stored16.decision_token(planner._graph, g, decided) if planner.g is g else None


def _faster(fused, more, base) -> bool:
    """Whether the kernels storing or loading an array the two decisions store differently
    take less predicted time under `more` than under `base` (None: nothing decided)."""
    g = fused.problem.graph
    mine, theirs = more[0], base[0] if base else {}
    moved = {v for v in set(mine) | set(theirs) if mine.get(v) != theirs.get(v)}
    touched = [k for k in fused.kernels
               if {through(g, n) for n in (*k.loads, *k.stores)} & moved]
    other = base[2] if base else fused.planner
    return _time(more[2], touched) < _time(other, touched)


def _time(planner, kernels) -> float:
    """Predicted seconds of these kernels (infinite where one finds no tiling)."""
    plans = [planner.plan(k, strict=False) for k in kernels]
    return float("inf") if None in plans else float(sum(p.cost.time for p in plans))
