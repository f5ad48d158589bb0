"""Plans: per kernel, the chosen groups and streams, and what each memory level holds and moves.

Planning is three stages the driver (`napkin.pipeline`) runs in turn, each a
function of the one before:

    prepare   the canonical IR, the planning size of every axis, the schedule hints
    fuse      the kernels (`fuse.py`), priced by quick estimates of each candidate
    tile      per kernel, the streamed axis, the tile sizes and the engine that
              minimise predicted time within every level's capacity, as a checked
              `Schedule` (schedule.py)

`plan(diagram, target, sizes, overrides)` runs all three. Sizes of dynamic axes
default to DEFAULT_SIZE for planning; `--shape` sets them. `baseline(plan)` is
the unfused plan (one kernel per equation) that `explain` compares with; no
other stage computes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import networkx as nx
import numpy as np

from ..diagrams.diagnostics import NapkinError, error
from . import hints as hint_mod
from . import ir
from . import schedule as schedules
from . import tensorcore
from .canonical import canonicalize
from .columns import Column, columns
from .cost import Choice, Cost, evaluate
from .diagram import Diagram
from .kernels import FusedKernel
from .model import Model, kernel_model
from .schedule import Schedule
from .search import fits, search
from .target import Target, load

DEFAULT_SIZE = 1024
ENGINES = ("auto", "tensor-cores", "cuda-cores")


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
                             "choice; make plans with plan.with_choices or plan.kernel_plan")


def kernel_plan(g: nx.DiGraph, k: FusedKernel, model: Model, cols, choice: Choice, cost: Cost,
                hints, sizes: dict, target: Target, sched: Schedule | None = None) -> KernelPlan:
    """A kernel's plan with its checked schedule (N0604 if the choice is not legal)."""
    sched = sched or schedules.build(g, k, model, choice, sizes, target)
    return KernelPlan(k, model, tuple(cols), choice, cost, tuple(hints), sched)


@dataclass(frozen=True)
class Plan:
    diagram: Diagram
    graph: nx.DiGraph            # the canonical IR the kernels refer to
    target: Target
    sizes: dict                  # planning size of every axis
    kernels: tuple[KernelPlan, ...]
    engine: str = "auto"         # auto | tensor-cores | cuda-cores (what the planner was told)
    defaulted: tuple[str, ...] = ()   # dynamic axes planned at DEFAULT_SIZE (no size given)
    hints: tuple = ()            # the resolved schedule hints (baseline() plans with them)

    @property
    def time(self) -> float:
        return sum(k.cost.time for k in self.kernels)

    @property
    def tensor_cores(self) -> bool:
        """Whether contractions were allowed on tensor cores."""
        return self.engine != "cuda-cores"


@dataclass(frozen=True)
class Problem:
    """What planning starts from: the canonical IR, sizes, target and resolved hints."""
    diagram: Diagram
    graph: nx.DiGraph
    target: Target
    sizes: dict
    hints: tuple
    defaulted: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Fused:
    """The kernels fusion chose, and the planner that priced them (its estimates memoised)."""
    problem: Problem
    kernels: tuple[FusedKernel, ...]
    planner: "KernelPlanner"


def planning_sizes(diagram: Diagram, shape: dict | None = None) -> dict[str, int]:
    """Every axis's size: static, else from `shape` (by axis or its size class), else the default."""
    shape = dict(shape or {})
    axes = diagram.ir.graph["axes"]
    by_rep = {}
    for name, value in shape.items():
        if name in axes:
            by_rep[axes[name].rep] = value
    out = {}
    for name, info in axes.items():
        if info.size is not None:
            out[name] = info.size
            continue
        value = shape.get(name, by_rep.get(info.rep, DEFAULT_SIZE))
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise error("N0304", f"size {value!r} of axis `{name}` is not a whole number",
                        help="sizes of dynamic axes are whole numbers (0 for an empty axis)")
        out[name] = max(1, int(value))   # an empty axis is planned as one position
    return out


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        from ..diagrams.diagnostics import UsageError, did_you_mean
        raise UsageError(error("N0804", f"unknown engine `{engine}`",
                               help=did_you_mean(engine, ENGINES, "engines: " + ", ".join(ENGINES)))
                         .diagnostics)
    return engine


def _in_diagram(diagram: Diagram, fn):
    """Run a stage; its errors point into the diagram's source."""
    try:
        return fn()
    except NapkinError as exc:
        raise NapkinError(exc.diagnostics, diagram.source) from None


def prepare(diagram: Diagram, target: Target | str | None = None, shape: dict | None = None,
            overrides: dict | None = None) -> Problem:
    """Stage `prepare`: canonical IR, planning sizes, resolved hints."""
    tgt = target if isinstance(target, Target) else load(target)
    sizes = planning_sizes(diagram, shape)

    def run():
        g = canonicalize(diagram.ir)
        return g, tuple(hint_mod.resolve(diagram.hints, overrides or {}, tgt, sizes))
    g, hints = _in_diagram(diagram, run)
    axes = diagram.ir.graph["axes"]
    given = {axes[a].rep for a in (shape or {}) if a in axes}
    defaulted = tuple(a for a, info in axes.items() if info.size is None and info.rep not in given)
    return Problem(diagram, g, tgt, sizes, hints, defaulted)


def fuse_kernels(problem: Problem, engine: str = "auto", fusion: bool = True) -> Fused:
    """Stage `fuse`: the kernels (one per equation without fusion)."""
    from .fuse import fuse, unfused_kernels
    planner = KernelPlanner(problem.graph, problem.target, problem.sizes, problem.hints,
                            check_engine(engine))
    kernels = _in_diagram(problem.diagram, lambda: fuse(problem.graph, planner) if fusion
                          else unfused_kernels(problem.graph))
    return Fused(problem, tuple(kernels), planner)


def tile(fused: Fused) -> Plan:
    """Stage `tile`: every kernel's schedule, cost and hints used."""
    pr = fused.problem

    def run():
        plans = tuple(fused.planner.plan(k) for k in fused.kernels)
        hint_mod.check_all_used(list(pr.hints), {h for p in plans for h in p.hints}, pr.graph,
                                list(fused.kernels))
        return plans
    plans = _in_diagram(pr.diagram, run)
    return Plan(pr.diagram, pr.graph, pr.target, pr.sizes, plans, fused.planner.engine,
                pr.defaulted, pr.hints)


def plan(diagram: Diagram, target: Target | str | None = None, shape: dict | None = None,
         overrides: dict | None = None, engine: str = "auto", fusion: bool = True) -> Plan:
    """The plan for a diagram on a target: prepare, fuse, tile (see the module docstring)."""
    return tile(fuse_kernels(prepare(diagram, target, shape, overrides), engine, fusion))


def baseline(p: Plan) -> tuple[KernelPlan, ...]:
    """The unfused plan of the same problem (one kernel per equation), for comparison; kernels
    that have no legal tiling on their own are left out."""
    from .fuse import unfused_kernels
    planner = KernelPlanner(p.graph, p.target, p.sizes, p.hints, p.engine)
    found = _in_diagram(p.diagram, lambda: [planner.plan(k, strict=False)
                                            for k in unfused_kernels(p.graph)])
    return tuple(kp for kp in found if kp is not None)


class KernelPlanner:
    """Plans single kernels, memoised (fusion asks about many candidate kernels)."""

    def __init__(self, g: nx.DiGraph, target: Target, sizes: dict, hints, engine: str = "auto"):
        self.g, self.target, self.sizes, self.hints = g, target, sizes, list(hints)
        self.engine = engine
        self._memo: dict = {}
        self._models: dict = {}

    def _model(self, k: FusedKernel, axis: str | None):
        """The kernel's cost model and columns when `axis` streams (fusion's quick estimate and
        the final plan of a kernel share them)."""
        key = (k.nodes, k.loads, k.stores, axis)
        if key not in self._models:
            model = kernel_model(self.g, k, axis)
            self._models[key] = (model, columns(self.g, model))
        model, cols = self._models[key]
        if model.kernel != k:          # the same nodes under the kernel's final name
            model = replace(model, kernel=k)
        return model, cols

    def plan(self, k: FusedKernel, strict: bool = True, quick: bool = False) -> KernelPlan | None:
        """The best plan of one kernel; `quick` searches a smaller space (fusion's estimates)."""
        key = (k.nodes, k.loads, k.stores, quick)
        if key not in self._memo:
            self._memo[key] = self._plan(k, quick)
        found = self._memo[key]
        if isinstance(found, (_Infeasible, _NotOnTensorCores)):
            if strict:
                raise found.error(k, self.target)
            return None
        return kernel_plan(self.g, k, found.model, found.columns, found.choice, found.cost,
                           found.hints, self.sizes, self.target)

    def _plan(self, k: FusedKernel, quick: bool = False):
        g = self.g
        fixed, used = hint_mod.fixed_for(g, k, self.hints, self.sizes)
        axes = [None] + list(k.reduced(g))
        if "stream" in fixed:
            axes = [fixed["stream"][0]]
        best = None
        tried = []
        for axis in axes:
            model, cols = self._model(k, axis)
            found = search(model, cols, self.target, self.sizes, fixed,
                           quick=quick)
            tried.append((model, cols))
            if found is None:
                continue
            choice, cost = found
            if best is None or (cost.time, axis is not None) < (best.cost.time, best.choice.stream is not None):
                best = KernelPlan(k, model, cols, choice, cost, tuple(used))
        if self.engine != "cuda-cores":
            # forced onto tensor cores: the final plan of a kernel with a contraction; fusion's
            # quick estimates price candidates as auto does, so a kernel that would ship at
            # scale is the kernel forced at any size
            forced = self.engine == "tensor-cores" and not quick
            on_tc = self._tensor_cores(k, tried, fixed, used, None if forced else best)
            if forced and on_tc is None and self._has_contraction(k):
                return _NotOnTensorCores(self._why_not(k, tried))
            if on_tc is not None:
                best = on_tc
        if best is None:
            return self._infeasible(k, tried, fixed, used)
        return best

    def _has_contraction(self, k: FusedKernel) -> bool:
        return any(isinstance(ir.op(self.g, n), ir.Contract) for n in k.nodes)

    def _why_not(self, k: FusedKernel, tried) -> str:
        """Why no tensor-core plan: the reason of the model that comes closest (an attention's
        with its keys streamed), or that no tensor-core tiling fits the hints and memory."""
        reasons = []
        for model, _ in tried:
            found = tensorcore.examine(self.g, k, model, self.target)
            if not isinstance(found, str):
                return "no tensor-core tiling of it fits the memory and the schedule hints"
            reasons.append((not model.streaming.pairs, found))
        if k.reduced(self.g):
            best = tensorcore.best_site(self.g, k, self.target)
            if isinstance(best, str):
                return best
        return min(reasons)[1] if reasons else "no contraction"

    def _tensor_cores(self, k: FusedKernel, tried, fixed, used, best):
        """The tensor-core plan of an eligible kernel (tensorcore.py) when it beats `best`
        (any, when `best` is None); `tried`: the (model, columns) the SIMT search built, one
        per streamed axis."""
        for model, cols in tried:
            where = tensorcore.site(self.g, k, model, self.target)
            if where is None:
                continue
            found = tensorcore.search_site(model, cols, self.target, self.sizes, where, fixed)
            if found is not None and (best is None or found[1].time < best.cost.time):
                best = KernelPlan(k, model, cols, found[0], found[1], tuple(used))
        return best

    def _infeasible(self, k: FusedKernel, tried, fixed, used) -> "_Infeasible":
        """Why no tiling fits: the smallest footprint found, and a hinted size that would fit."""
        best = None
        for model, cols in tried:
            cost = self._minimal(model, cols, fixed)
            over = [lc for lc in cost.levels[1:] if lc.M > lc.capacity]
            if over and (best is None or over[0].M / over[0].capacity < best[1].M / best[1].capacity):
                best = (model, over[0], cols)
        if best is None:      # every level fits: the hints contradict the block's rules
            if used:
                return _Infeasible(None, 0, 0, (
                    "a thread's tile (`group a by N at registers`) is at most its block's "
                    f"group, a block has at most {self.target.max_threads_per_block} threads; "
                    "relax or drop a hint"), used[0])
            return _Infeasible(None, 0, 0, "try a larger target", None)
        model, lc, cols = best

        def fitting(pairs) -> bool:      # with these hinted sizes, do the smallest tiles fit?
            return fits(self._minimal(model, cols, self._with_sizes(fixed, pairs)))
        for h in used:
            size = h.size
            while size > 1:
                size //= 2
                if fitting([(h, size)]):
                    return _Infeasible(lc.name, lc.M, lc.capacity,
                                       f"`{h.kind} {h.axis} by {size}{self._at(h)}` (or less) "
                                       "would fit", h)
        if used:                 # no single hint suffices: all of them together?
            sized = [(h, h.size) for h in used]
            while any(n > 1 for _, n in sized):
                sized = [(h, max(1, n // 2)) for h, n in sized]
                if fitting(sized):
                    return _Infeasible(lc.name, lc.M, lc.capacity, " and ".join(
                        f"`{h.kind} {h.axis} by {n}{self._at(h)}`" for h, n in sized)
                        + " (or less) would fit", used[0])
            return _Infeasible(lc.name, lc.M, lc.capacity,
                               "relax the schedule hints, make a whole axis smaller with -D, "
                               "or stream it", used[0])
        return _Infeasible(lc.name, lc.M, lc.capacity,
                           "make a whole axis smaller with -D, or stream it", None)

    def _at(self, h) -> str:
        return f" at {self.target.level_names[h.level]}" if h.level > 1 else ""

    def _with_sizes(self, fixed: dict, pairs) -> dict:
        """The fixed decisions with these (hint, size) pairs in place (past the axis: whole)."""
        trial = {**fixed}
        for h, n in pairs:
            key, n = _KEY[(h.kind, min(h.level, 2))], min(n, self.sizes[h.axis])
            if key in ("group", "thread"):
                trial[key] = {**trial.get(key, {}), h.axis: n}
            else:
                trial[key] = (h.axis, n)
        return trial

    def _minimal(self, model: Model, cols, fixed) -> Cost:
        """The cost of the smallest tiles the fixed choices allow."""
        fixed_threads = fixed.get("thread", {})
        group = {a: max(fixed.get("group", {}).get(a, 1), fixed_threads.get(a, 1))
                 for a in model.woven}
        stream = None
        if model.streaming.axis:
            stream = fixed["stream"] if fixed.get("stream") else (model.streaming.axis, 1)
        thread = ()
        if len(self.target.levels) > 2:
            cap = self.target.max_threads_per_block
            block = 1
            for g in group.values():
                block *= g
            t = {a: fixed_threads.get(a, 1) for a in group}
            for a in sorted(group, key=lambda a: -group[a]):
                if a in fixed_threads:
                    continue
                while block > cap and t[a] < group[a]:
                    t[a] *= 2
                    block = 1
                    for b, g in group.items():
                        block *= -(-g // t[b])
            thread = tuple(sorted(t.items()))
        choice = Choice(tuple(sorted((a, g) for a, g in group.items() if g < self.sizes[a])),
                        stream, thread, None, fixed.get("inner"))
        return evaluate(model, cols, choice, self.sizes, self.target)


# which fixed decision of the search a hint sets, by (kind, level: 1 blocks, 2 threads)
_KEY = {("group", 1): "group", ("group", 2): "thread", ("stream", 1): "stream",
        ("stream", 2): "inner"}


@dataclass(frozen=True)
class _Infeasible:
    level: str | None
    needed: float
    capacity: float
    fix: str
    hint: object

    def error(self, k: FusedKernel, target: Target) -> NapkinError:
        span = self.hint.info.span if self.hint is not None and self.hint.info else None
        if self.level is None:
            why = " with these schedule hints" if self.hint is not None else ""
            return error("N0603", f"no tiling of kernel {k.name} fits the target {target.name}"
                         f"{why}", span, help=self.fix)
        return error("N0603", f"kernel {k.name} needs {int(self.needed):,} bytes of {self.level} "
                     f"per {_unit(target, self.level)} even with the smallest tiles, but "
                     f"{self.level} holds {int(self.capacity):,}", span, help=self.fix)


@dataclass(frozen=True)
class _NotOnTensorCores:
    why: str

    def error(self, k: FusedKernel, target: Target) -> NapkinError:
        return error("N0606", f"kernel {k.name} cannot run on tensor cores: {self.why}",
                     help="--engine auto lets the planner choose, --engine cuda-cores keeps "
                          "every kernel on the CUDA cores")


def _unit(target: Target, level: str) -> str:
    return target.level(level).unit or "unit"


def with_choices(plan: Plan, choices) -> Plan:
    """The same kernels with other decisions, one Choice per kernel, each checked (N0604 when
    a choice is not a legal schedule of its kernel); for tests, fuzzing and hand tuning."""
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
        axis = choice.stream[0] if choice.stream else None
        if axis is not None and axis not in kp.kernel.reduced(plan.graph):
            raise error("N0604", f"schedule of kernel {kp.kernel.name} is not legal: it streams "
                        f"`{axis}`, which the kernel does not reduce",
                        help="stream one of: " + (", ".join(kp.kernel.reduced(plan.graph))
                                                  or "nothing (this kernel reduces no axis)"))
        model = kernel_model(plan.graph, kp.kernel, axis)
        cols = columns(plan.graph, model)
        sched = schedules.build(plan.graph, kp.kernel, model, choice, plan.sizes, plan.target)
        cost = evaluate(model, cols, choice, plan.sizes, plan.target)
        kernels.append(kernel_plan(plan.graph, kp.kernel, model, cols, choice, cost, kp.hints,
                                   plan.sizes, plan.target, sched))
    return Plan(plan.diagram, plan.graph, plan.target, plan.sizes, tuple(kernels), plan.engine,
                plan.defaulted, plan.hints)
