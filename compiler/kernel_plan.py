"""Planning one kernel: `KernelPlan` (a kernel with its choice, cost and checked Schedule)
and `KernelPlanner`, which searches a kernel's tilings under the schedule hints and the
engine asked for, memoised for fusion's many candidate kernels, and explains why none fits
(N0603) or why a kernel cannot run on tensor cores (N0606). `plan.py` sequences the stages
over all kernels."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from ..diagrams.diagnostics import NapkinError, error
from . import hints as hint_mod
from . import infeasible, ir, scatter, stored16, tensorcore, wgmma, wgmma_search
from . import schedule as schedules
from .columns import Column
from .cost import Choice, Cost
from .graph import DiGraph
from .infeasible import NO_TILING, Infeasible
from .kernels import FusedKernel
from .model import Model
from .model_memo import _shared_model
from .schedule import Schedule
from .search import searched
from .target import Target
from .split_info import infos


@dataclass(frozen=True)
class KernelPlan:
    kernel: FusedKernel
    model: Model
    columns: tuple[Column, ...]
    choice: Choice
    cost: Cost
    hints: tuple[hint_mod.Hint, ...] = ()
    schedule: Schedule | None = None     # None only inside the planner's search (see below)

    def __post_init__(self):
        # a plan that leaves the planner has the schedule of its own choice: one built by
        # kernel_plan (or with_choices), never a stale one from dataclasses.replace
        if self.schedule is not None and self.schedule.choice != self.choice:
            raise ValueError(f"kernel {self.kernel.name}: the schedule was built for another "
                             "choice; make plans with variants.with_choices or kernel_plan.kernel_plan")

    @property
    def leaves_masked_terms_out(self) -> bool:
        """Whether the kernel leaves out terms a mask makes 0 rather than computing them (a NaN
        or inf read only there may not reach the output, docs/language.md, NaN): it skips the
        chunks a mask hides (masking.chunk_mask), or adds a masked sum's kept terms alone (a
        scatter-add, scatter.py)."""
        return self.model.mask is not None or self.choice.scatter


def kernel_plan(g: DiGraph, k: FusedKernel, model: Model, cols, choice: Choice, cost: Cost,
                hints, sizes: dict, target: Target, sched: Schedule | None = None) -> KernelPlan:
    """A kernel's plan with its checked schedule (N0604 if the choice is not legal)."""
    sched = sched or schedules.build(g, k, model, choice, sizes, target, int(cost.stages))
    return KernelPlan(k, model, tuple(cols), choice, cost, tuple(hints), sched)


def scatter_plan(g: DiGraph, k: FusedKernel, model: Model, cols, sizes: dict, target: Target,
                 hints=(), with_schedule: bool = False) -> KernelPlan | None:
    """Kernel k as a scatter-add (scatter.py), costed; None when it is not one or the target
    has no atomics."""
    found = scatter.site(g, k)
    cost = scatter.cost(g, k, found, sizes, target) if found is not None else None
    if cost is None:
        return None
    choice = Choice(scatter=True)
    if with_schedule:
        return kernel_plan(g, k, model, cols, choice, cost, hints, sizes, target)
    return KernelPlan(k, model, tuple(cols), choice, cost, tuple(hints))


class KernelPlanner:
    """Plans single kernels, memoised (fusion asks about many candidate kernels)."""

    def __init__(self, g: DiGraph, target: Target, sizes: dict, hints, engine: str = "auto",
                 scatter: bool = True, across: bool = True, runnable: bool = False,
                 token: int | None = None):
        self.g, self.target, self.sizes, self.hints = g, target, sizes, list(hints)
        self.engine, self.runnable = engine, runnable     # (runnable: plan.plan's retry)
        # False: masked sums planned dense; no chain adds a product over its rows across
        self.scatter, self.across = scatter, across     # blocks (chain.Across): explain compares
        self._memo: dict = {}
        self._models: dict = {}
        self._plans: dict = {}            # kernel -> its KernelPlan (plan: the Schedule built once)
        # the graph's contents (models are shared): `token` where known (fingerprint.derived)
        self._graph = token if token is not None else stored16.planning_token(g)
        # what a kernel's search reads beside the kernel (None: not shared, see _shared_found)
        self._problem = None if self._graph is None else (
            self._graph, target, tuple(sizes.items()), tuple(self.hints), engine, scatter, across,
            runnable)
        try:
            hash(self._problem)
        except TypeError:                 # (a size or hint that is not a value)
            self._problem = None

    def _model(self, k: FusedKernel, axis: str | None):
        """The kernel's cost model and columns when `axis` streams (fusion's quick estimate and
        the final plan of a kernel share them, and so do planners of equal graphs: every
        target and shape a diagram is planned for)."""
        key = (k.nodes, k.loads, k.stores, axis)
        if key not in self._models:
            self._models[key] = _shared_model(self.g, self._graph, k, axis)
        model, cols = self._models[key]
        if model.kernel is not k:         # the same nodes under the kernel's final name
            model = replace(model, kernel=k)
        return model, cols

    def _found(self, k: FusedKernel, quick: bool):
        key = (k.nodes, k.loads, k.stores, quick)
        if key not in self._memo:
            self._memo[key] = _shared_found(self, k, quick)
        return self._memo[key]

    def estimate(self, k: FusedKernel) -> KernelPlan | None:
        """Fusion's quick estimate of one kernel (a smaller search): its model, choice and cost,
        with no Schedule built; None when no tiling fits."""
        found = self._found(k, quick=True)
        return None if isinstance(found, (Infeasible, _NotOnTensorCores)) else found

    def plan(self, k: FusedKernel, strict: bool = True) -> KernelPlan | None:
        """The best plan of one kernel, with its checked Schedule."""
        found = self._found(k, quick=False)
        if isinstance(found, (Infeasible, _NotOnTensorCores)):
            if strict:
                raise found.error(k, self.target)
            return None
        if k not in self._plans:      # (the 16-bit storage decision, its check and tiling)
            self._plans[k] = kernel_plan(self.g, k, found.model, found.columns, found.choice,
                                         found.cost, found.hints, self.sizes, self.target)
        return self._plans[k]

    def planned(self, ks) -> list[KernelPlan | None]:
        """The full plan of each kernel (None: no legal tiling on its own): the unfused plan
        explain compares with (plan.baseline), and fusion's check of a close merge
        (fuse._greedy)."""
        return [self.plan(k, strict=False) for k in ks]

    def _plan(self, k: FusedKernel, quick: bool = False):
        g = self.g
        try:            # hints streaming, or splitting over lanes, two axes of the kernel:
            clash = hint_mod.lanes_clash(g, k, self.hints)     # one statement is refused,
            if clash is not None:                              # fusion keeps two apart
                raise clash
            fixed, used = hint_mod.fixed_for(g, k, self.hints, self.sizes)
        except NapkinError as two:
            if len(k.equations) > 1:
                return Infeasible(None, 0, 0, two.diagnostics[0].help, None)
            raise
        axes = [None] + list(k.reduced(g))
        if "stream" in fixed:
            axes = [fixed["stream"][0]]
        best = paired = None
        tried = []
        for axis in axes:
            model, cols = self._model(k, axis)
            found = searched(model, cols, self.target, self.sizes, fixed, quick=quick)
            tried.append((model, cols))
            if found is None:
                continue
            choice, cost = found
            plan = KernelPlan(k, model, cols, choice, cost, tuple(used))
            if best is None or (cost.time, axis is not None) < (best.cost.time, best.choice.stream is not None):
                best = plan
            if model.streaming.pairs and (paired is None or cost.time < paired.cost.time):
                paired = plan
        if paired is not None and best.choice.stream is None and len(self.target.levels) > 2:
            # a softmax read by a contraction over its axis, unstreamed, is lowered point by
            # point: each output element's key loop computes its scores again, whole (64 FMAs
            # a key and element where the lanes split them), which the model does not
            # charge (the decode split's partial: 6.7x its issue slots, static SASS); the
            # online softmax computes each score once (FlashAttention's, FlashDecoding's; a
            # target of threads: the paper's two-level machine has no such lowering)
            best = paired
        if self.engine != "cuda-cores":
            # forced onto tensor cores: the final plan of a kernel with a contraction; fusion's
            # quick estimates price candidates as auto does, so a kernel that would ship at
            # scale is the kernel forced at any size (`runnable`: several statements only so)
            forced = self.engine == "tensor-cores" and (
                not quick or self.runnable and len(k.equations) > 1)
            on_tc = self._tensor_cores(k, tried, fixed, used, None if forced else best)
            if forced and on_tc is None and self._has_contraction(k):
                return _NotOnTensorCores(self._why_not(k, tried) if not quick else "",
                                         self._product_span(k), stored16.declare(self.g, k))
            if on_tc is not None:
                best = on_tc
        if not fixed and self.scatter:    # tiles hinted: the dense plan the hints describe
            best = self._scatter(k, best) or best
        if best is None:     # (why: only a final plan says it; an estimate is None either way)
            return NO_TILING if quick else \
                infeasible.why(self.target, self.sizes, k, tried, fixed, used)
        return best

    def _scatter(self, k: FusedKernel, best):
        """The kernel as a scatter-add (scatter.py) when it is one and predicted faster than
        `best`; else None."""
        if scatter.site(self.g, k) is None:
            return None
        model, cols = self._model(k, None)
        plan = scatter_plan(self.g, k, model, cols, self.sizes, self.target)
        return None if plan is None or (best is not None and plan.cost.time >= best.cost.time) \
            else plan

    def _has_contraction(self, k: FusedKernel) -> bool:
        """A contraction of the diagram's (a split's merge over its splits does not count:
        it is napkin's, and too small for the tensor cores)."""
        parts = {info.part_axis for info in infos(self.g)}
        return any(isinstance(ir.op(self.g, n), ir.Contract) and
                   not parts & set(ir.op(self.g, n).axes) for n in k.nodes)

    def _product_span(self, k: FusedKernel):
        """Where the kernel's first product of the diagram is written (None: none is)."""
        spans = (self.g.nodes[n].get("span") for n in k.nodes
                 if isinstance(ir.op(self.g, n), ir.Contract))
        return next((s for s in spans if s is not None), None)

    def _why_not(self, k: FusedKernel, tried) -> str:
        """Why no tensor-core plan: the reason of the model that comes closest (an attention's
        with its keys streamed), or that no tensor-core tiling fits the hints and memory."""
        reasons = []
        for model, _ in tried:
            found = tensorcore.examine(self.g, k, model, self.target, self.sizes)
            if not isinstance(found, str):
                return "no tensor-core tiling of it fits the memory and the schedule hints"
            reasons.append((not model.streaming.pairs, found))
        if k.reduced(self.g):
            best = tensorcore.best_site(self.g, k, self.target, self.sizes)
            if isinstance(best, str):
                return best
        return min(reasons)[1] if reasons else "no contraction"

    def _tensor_cores(self, k: FusedKernel, tried, fixed, used, best):
        """The tensor-core plan of an eligible kernel (tensorcore.py) when it beats `best`
        (any, when `best` is None); `tried`: the (model, columns) the SIMT search built, one
        per streamed axis."""
        for base, cols in tried:
            # (an attention's rows packed and not, where both can be: the faster is kept)
            for where in tensorcore.sites(self.g, k, base, self.target, self.sizes, fixed):
                if not self.across and getattr(where, "across", ()) + getattr(where, "sums", ()):
                    continue
                model = tensorcore.for_site(self.g, k, base, where, self.sizes)
                found = tensorcore.search_site(model, cols, self.target, self.sizes, where,
                                               fixed)
                if isinstance(where, tensorcore.Site) and \
                        wgmma.why_not(self.g, k, model, where, self.target) is None:
                    # Hopper: the faster of mma.sync's and wgmma's best tilings (compiler/wgmma.py)
                    other = wgmma_search.search(self.g, model, cols, self.target, self.sizes, where,
                                                fixed)
                    if other is not None and (found is None or other[1].time < found[1].time):
                        found = other
                if found is not None and (best is None or found[1].time < best.cost.time):
                    best = KernelPlan(k, model, cols, found[0], found[1], tuple(used))
        return best

_FOUND: OrderedDict = OrderedDict()      # (planner's problem, kernel, quick) -> _plan's answer
_MAX_FOUND = 4096


def _shared_found(planner: KernelPlanner, k: FusedKernel, quick: bool):
    """planner._plan(k, quick), memoised across planners of equal problems (the graph's
    stored16.planning_token, target, sizes, hints, engine, scatter, across: a diagram planned
    again, by another test or another entry point, at the same target and shape). The answer
    depends on the kernel's nodes, loads and stores alone, except for the kernel it names: a plan's
    `kernel` and its model's are `k` itself (another candidate with the same nodes may be named
    otherwise), so an answer found for another kernel is handed back under `k`, as _plan would
    have made it. (A NapkinError _plan raises is not memoised: it is raised again.)"""
    if planner._problem is None:
        return planner._plan(k, quick)
    key = (planner._problem, k.nodes, k.loads, k.stores, quick)
    found = _FOUND.get(key)
    if found is None:
        found = _FOUND[key] = planner._plan(k, quick)
        if len(_FOUND) > _MAX_FOUND:
            _FOUND.popitem(last=False)
        return found
    _FOUND.move_to_end(key)
    # (by identity: an equal kernel's boundary reason is read only when explain asks)
    if isinstance(found, KernelPlan) and (found.kernel is not k or found.model.kernel is not k):
        found = replace(found, kernel=k, model=replace(found.model, kernel=k))
    return found


@dataclass(frozen=True)
class _NotOnTensorCores:
    why: str
    span: object = None         # the kernel's first product, as the diagram writes it
    fix: str = ""               # what the diagram can declare (stored16.declare)

    def error(self, k: FusedKernel, target: Target) -> NapkinError:
        return error("N0606", f"kernel {k.name} cannot run on tensor cores: {self.why}",
                     self.span, help=self.fix + "--engine auto lets the planner choose, "
                     "--engine cuda-cores keeps every kernel on the CUDA cores")
