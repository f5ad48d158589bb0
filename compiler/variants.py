"""A plan with some decisions made by hand: other choices per kernel, another split merge,
another pipeline depth; for tests, fuzzing, hand tuning and timing on a GPU. Each is checked
as the planner checks its own (N0604, N0607); the costs stay the model's."""

from __future__ import annotations

from dataclasses import replace

from ..diagrams.diagnostics import error
from . import schedule as schedules
from . import packing, sibling_tiles, siblings, tensorcore
from .columns import columns
from .cost import Choice, evaluate
from .kernel_plan import kernel_plan, scatter_plan
from .last_block import decide as decide_tail
from .model import kernel_model
from .plan import Plan, in_diagram


def with_choices(plan: Plan, choices) -> Plan:
    """The same kernels with other decisions, one Choice per kernel, each checked (N0604 when
    a choice is not a legal schedule of its kernel); for tests, fuzzing and hand tuning. A
    split's merge kernels launch on their own (the last-block merge's tiling rules are the
    planner's: last_block.py). Which products share a launch is decided again for these
    kernels by the planner's rule (siblings.decide: other tiles, other thread counts, other
    prices), never copied from `plan`; the given tilings are kept (none is tiled again to
    share a launch: sibling_tiles.py), what `plan` recorded of those tiled so kept too."""
    choices = list(choices)
    if len(choices) != len(plan.kernels):
        raise error("N0604", f"{len(choices)} choice(s) for {len(plan.kernels)} kernel(s)",
                    help="give one choice per kernel, in launch order")
    kernels = []
    for kp, choice in zip(plan.kernels, choices):
        if not isinstance(choice, Choice):
            raise error("N0604", f"kernel {kp.kernel.name}: {choice!r} is not a Choice",
                        help="build it with napkin.compiler.cost.Choice")
        if choice.stream is not None and (not isinstance(choice.stream, tuple)
                                          or len(choice.stream) != 2):
            raise error("N0604", f"kernel {kp.kernel.name}: stream {choice.stream!r} is not "
                        "(axis, chunk)", help="for example stream=('x', 64)")
        if choice.scatter:            # a scatter-add (scatter.py): no tiles to check
            model = kernel_model(plan.graph, kp.kernel, None)
            found = scatter_plan(plan.graph, kp.kernel, model, columns(plan.graph, model),
                                 plan.sizes, plan.target, kp.hints, with_schedule=True)
            if found is None:
                raise error("N0604", f"kernel {kp.kernel.name} cannot be a scatter-add on "
                            f"{plan.target.name}", help="give it a dense choice")
            kernels.append(found)
            continue
        axis = choice.stream[0] if choice.stream else None
        if axis is not None and axis not in kp.kernel.reduced(plan.graph):
            raise error("N0604", f"schedule of kernel {kp.kernel.name} is not legal: it streams "
                        f"`{axis}`, which the kernel does not reduce",
                        help="stream one of: " + (", ".join(kp.kernel.reduced(plan.graph))
                                                  or "nothing (this kernel reduces no axis)"))
        model = kernel_model(plan.graph, kp.kernel, axis)
        cols = columns(plan.graph, model)
        where = tensorcore.site(plan.graph, kp.kernel, model, plan.target, plan.sizes,
                                packing.from_choice(choice)) if choice.warps else None
        if where is not None:   # what the site computes as it stages (as the planner)
            model = tensorcore.for_site(plan.graph, kp.kernel, model, where, plan.sizes)
        sched = schedules.build(plan.graph, kp.kernel, model, choice, plan.sizes, plan.target)
        cost = evaluate(model, cols, choice, plan.sizes, plan.target)
        if sched.stages > 1:           # the pipeline depth the cost model chose
            sched = replace(sched, stages=int(cost.stages))
        kernels.append(kernel_plan(plan.graph, kp.kernel, model, cols, choice, cost, kp.hints,
                                   plan.sizes, plan.target, sched))
    kernels, launches = siblings.decide(plan.graph, tuple(kernels), plan.sizes, plan.target)
    # (a member tiled to share its launch, given its plan's choice again, says so still)
    launches = sibling_tiles.kept(plan.launches, launches,
                                  lambda i: choices[i] == plan.kernels[i].choice)
    return Plan(plan.diagram, plan.graph, plan.target, plan.sizes, kernels, plan.engine,
                plan.defaulted, plan.hints, plan.split, specialised=plan.specialised,
                unspecialised=plan.unspecialised, launches=launches)


def with_merge(plan: Plan, merge: str) -> Plan:
    """The same plan with its splits' merges decided again (`merge`: auto, kernel or
    last-block; last_block.py): N0607 when `last-block` cannot be; the kernels are kept
    (a plan whose merges already run in the last blocks is returned as it is). The shared
    launches are decided again after it, as the planner orders the two (a kernel whose last
    blocks merge launches alone: siblings.eligible)."""
    if plan.tails:
        return plan
    own = siblings.unshared(plan.kernels, plan.launches)
    kernels, tails = in_diagram(plan.diagram, lambda: decide_tail(
        plan.graph, own, plan.split, plan.sizes, plan.target, merge))
    kernels, launches = siblings.decide(plan.graph, kernels, plan.sizes, plan.target, tails)
    return replace(plan, kernels=kernels, tails=tails,
                   launches=sibling_tiles.kept(plan.launches, launches))


def with_stages(plan: Plan, stages: int) -> Plan:
    """The same plan with every tensor-core kernel's cp.async pipeline `stages` deep (2 to
    occupancy.MAX_STAGES) instead of the depth the cost model chose; for tests and for
    timing depths on a GPU (benchmarks/gpu_stages.py). The costs stay the model's own."""
    from .occupancy import MAX_STAGES
    if isinstance(stages, bool) or not isinstance(stages, int) or not 2 <= stages <= MAX_STAGES:
        raise error("N0604", f"a pipeline of {stages!r} stages", help=f"2 to {MAX_STAGES}")
    return replace(plan, kernels=tuple(
        replace(kp, schedule=replace(kp.schedule, stages=stages)) if kp.schedule.stages > 1
        else kp for kp in plan.kernels))
