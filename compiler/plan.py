"""Plans: per kernel, the chosen groups and streams, and what each memory level holds and moves.

`plan(diagram, target, sizes, overrides)` canonicalises the IR, fuses it into
kernels (`fuse.py`), and for each kernel searches the streamed axis and the
tile sizes that minimise predicted time within every level's capacity. Sizes
of dynamic axes default to DEFAULT_SIZE for planning; `--shape` sets them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from ..diagrams.diagnostics import NapkinError, error
from . import hints as hint_mod
from . import ir
from . import tensorcore
from .canonical import canonicalize
from .columns import Column, columns
from .cost import Choice, Cost, evaluate
from .diagram import Diagram
from .kernels import Kernel
from .model import Model, build
from .search import fits, search
from .target import Target, load

DEFAULT_SIZE = 1024


@dataclass(frozen=True)
class KernelPlan:
    kernel: Kernel
    model: Model
    columns: tuple[Column, ...]
    choice: Choice
    cost: Cost
    hints: tuple[hint_mod.Hint, ...] = ()


@dataclass(frozen=True)
class Plan:
    diagram: Diagram
    graph: nx.DiGraph            # the canonical IR the kernels refer to
    target: Target
    sizes: dict                  # planning size of every axis
    kernels: tuple[KernelPlan, ...]
    unfused: tuple[KernelPlan, ...] = field(default=())
    tensor_cores: bool = False
    defaulted: tuple[str, ...] = ()   # dynamic axes planned at DEFAULT_SIZE (no size given)

    @property
    def time(self) -> float:
        return sum(k.cost.time for k in self.kernels)


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


def plan(diagram: Diagram, target: Target | str | None = None, shape: dict | None = None,
         overrides: dict | None = None, tensor_cores: bool = True, fusion: bool = True) -> Plan:
    """The plan for a diagram on a target (see the module docstring)."""
    from .fuse import fuse, unfused_kernels
    tgt = target if isinstance(target, Target) else load(target)
    sizes = planning_sizes(diagram, shape)
    try:
        g = canonicalize(diagram.ir)
        hints = hint_mod.resolve(diagram.hints, overrides or {}, tgt, sizes)
        planner = KernelPlanner(g, tgt, sizes, hints, tensor_cores)
        kernels = fuse(g, planner) if fusion else unfused_kernels(g)
        plans = tuple(planner.plan(k) for k in kernels)
        hint_mod.check_all_used(hints, {h for p in plans for h in p.hints}, g, kernels)
        base = unfused_kernels(g)
        unfused = tuple(planner.plan(k, strict=False) for k in base)
    except NapkinError as exc:
        raise NapkinError(exc.diagnostics, diagram.source) from None
    given = {diagram.ir.graph["axes"][a].rep for a in (shape or {}) if a in diagram.ir.graph["axes"]}
    defaulted = tuple(a for a, info in diagram.ir.graph["axes"].items()
                      if info.size is None and info.rep not in given)
    return Plan(diagram, g, tgt, sizes, plans, tuple(p for p in unfused if p is not None),
                tensor_cores, defaulted)


class KernelPlanner:
    """Plans single kernels, memoised (fusion asks about many candidate kernels)."""

    def __init__(self, g: nx.DiGraph, target: Target, sizes: dict, hints, tensor_cores: bool):
        self.g, self.target, self.sizes, self.hints = g, target, sizes, hints
        self.tensor_cores = tensor_cores
        self._memo: dict = {}

    def plan(self, k: Kernel, strict: bool = True, quick: bool = False) -> KernelPlan | None:
        """The best plan of one kernel; `quick` searches a smaller space (fusion's estimates)."""
        key = (k.nodes, k.loads, k.stores, quick)
        if key not in self._memo:
            self._memo[key] = self._plan(k, quick)
        found = self._memo[key]
        if isinstance(found, _Infeasible):
            if strict:
                raise found.error(k, self.target)
            return None
        return KernelPlan(k, found.model, found.columns, found.choice, found.cost, found.hints)

    def _plan(self, k: Kernel, quick: bool = False):
        g = self.g
        fixed, used = hint_mod.fixed_for(g, k, self.hints, self.sizes)
        axes = [None] + list(k.reduced(g))
        if "stream" in fixed:
            axes = [fixed["stream"][0]]
        best = None
        tried = []
        for axis in axes:
            model = build(g, k, axis)
            cols = columns(g, model)
            found = search(model, cols, self.target, self.sizes, fixed,
                           quick=quick)
            tried.append((model, cols))
            if found is None:
                continue
            choice, cost = found
            if best is None or (cost.time, axis is not None) < (best.cost.time, best.choice.stream is not None):
                best = KernelPlan(k, model, cols, choice, cost, tuple(used))
        if self.tensor_cores:
            best = self._tensor_cores(k, tried, fixed, used, best)
        if best is None:
            return self._infeasible(k, tried, fixed, used)
        return best

    def _tensor_cores(self, k: Kernel, tried, fixed, used, best):
        """The tensor-core plan of an eligible kernel (tensorcore.py) when it beats `best`;
        `tried`: the (model, columns) the SIMT search built, one per streamed axis."""
        for model, cols in tried:
            where = tensorcore.site(self.g, k, model, self.target)
            if where is None:
                continue
            found = tensorcore.search_site(model, cols, self.target, self.sizes, where, fixed)
            if found is not None and (best is None or found[1].time < best.cost.time):
                best = KernelPlan(k, model, cols, found[0], found[1], tuple(used))
        return best

    def _infeasible(self, k: Kernel, tried, fixed, used) -> "_Infeasible":
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

    def error(self, k: Kernel, target: Target) -> NapkinError:
        span = self.hint.info.span if self.hint is not None and self.hint.info else None
        if self.level is None:
            why = " with these schedule hints" if self.hint is not None else ""
            return error("N0603", f"no tiling of kernel {k.name} fits the target {target.name}"
                         f"{why}", span, help=self.fix)
        return error("N0603", f"kernel {k.name} needs {int(self.needed):,} bytes of {self.level} "
                     f"per {_unit(target, self.level)} even with the smallest tiles, but "
                     f"{self.level} holds {int(self.capacity):,}", span, help=self.fix)


def _unit(target: Target, level: str) -> str:
    return target.level(level).unit or "unit"


def node_name(g: nx.DiGraph, n: int) -> str:
    op = ir.op(g, n)
    return getattr(op, "name", f"%{n}")


def with_choices(plan: Plan, choices) -> Plan:
    """The same kernels with other decisions (for tests and fuzzing: any legal choice)."""
    from .model import build as build_model
    kernels = []
    for kp, choice in zip(plan.kernels, choices):
        axis = choice.stream[0] if choice.stream else None
        model = build_model(plan.graph, kp.kernel, axis)
        cols = columns(plan.graph, model)
        cost = evaluate(model, cols, choice, plan.sizes, plan.target)
        kernels.append(KernelPlan(kp.kernel, model, cols, choice, cost, kp.hints))
    return Plan(plan.diagram, plan.graph, plan.target, plan.sizes, tuple(kernels), plan.unfused,
                plan.tensor_cores, plan.defaulted)
