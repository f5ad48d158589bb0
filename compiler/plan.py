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

from .graph import DiGraph
import numpy as np

from ..diagrams.diagnostics import NapkinError, error
from . import hints as hint_mod
from . import ir
from . import merge, sibling_tiles, splitting, stored16, stored16_stages
from .splitting import SplitChoice
from .canonical import canonicalize, nested_contractions
from .collect import fewer_full_collections
from .nested import separate_nested
from .local_merge import merge_products, with_apart
from .diagram import Diagram
from .kernel_plan import KernelPlan, KernelPlanner
from .kernels import FusedKernel
from .last_block import Tail, decide as decide_tail
from .target import Target, load

DEFAULT_SIZE = 1024
ENGINES = ("auto", "tensor-cores", "cuda-cores")


@dataclass(frozen=True)
class Plan:
    diagram: Diagram
    graph: DiGraph            # the canonical IR the kernels refer to
    target: Target
    sizes: dict                  # planning size of every axis
    kernels: tuple[KernelPlan, ...]
    engine: str = "auto"         # auto | tensor-cores | cuda-cores (what the planner was told)
    defaulted: tuple[str, ...] = ()   # dynamic axes planned at DEFAULT_SIZE (no size given)
    hints: tuple = ()            # the resolved schedule hints (baseline() plans with them)
    split: "SplitChoice | None" = None   # a reduced axis split across blocks (splitting.py)
    tails: "tuple[Tail, ...]" = ()   # the splits' merges run by their partial kernels' last
                                 # blocks (last_block.py), in the order the splits were made
    specialised: dict = field(default_factory=dict)   # dynamic axes of the diagram planned
                                 # fixed at these sizes (specialise.py): `diagram` is the one
                                 # checked with them, and the program runs at them only
    unspecialised: float = 0.0   # the predicted time with them dynamic (explain says it)
    refused: str = ""            # why the plan with them fixed was not taken (an error)
    launches: tuple = ()         # independent products reading one array launched as one grid
                                 # (siblings.Launch: lowering and explain read it)

    @property
    def tail(self) -> "Tail | None":
        """The first split's last-block merge (`tails[0]`), None where no merge runs so."""
        return self.tails[0] if self.tails else None

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
    graph: DiGraph
    target: Target
    sizes: dict
    hints: tuple
    defaulted: tuple[str, ...]
    unmerged: "Problem | None" = None   # without the free axes merged (merge.py), then
                                        # without the products' own (local_merge.py): priced


@dataclass(frozen=True, eq=False)
class Fused:
    """The kernels fusion chose, and the planner that priced them (its estimates memoised)."""
    problem: Problem
    kernels: tuple[FusedKernel, ...]
    planner: "KernelPlanner"
    split: "SplitChoice | None" = None
    # these kernels with the 16-bit storage decision applied (stored16_stages.applied), when
    # fusion made it already (its fallback check): tiling reads it instead of deciding again
    stored16: "Fused | None" = field(default=None, compare=False, repr=False)


def planning_sizes(diagram: Diagram, shape: dict | None = None) -> dict[str, int]:
    """Every axis's size: static, else from `shape` (by axis or its size class), else the default."""
    shape = dict(shape or {})
    axes = diagram.ir.graph["axes"]
    by_rep, named = {}, {}
    for name, value in shape.items():
        if name in axes:
            rep = axes[name].rep
            if rep in by_rep and by_rep[rep] != value:
                raise error("N0303", f"sizes {named[rep]}={by_rep[rep]} and {name}={value} for "
                            f"axes the diagram forces to one size", help=f"give `{named[rep]}` "
                            f"and `{name}` one size (the diagram reads one along the other)")
            by_rep[rep], named[rep] = value, name
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


def planning_data(diagram: Diagram, sizes: dict, data: dict) -> dict:
    """name -> masking.PlanningData, checked: each an integer or boolean input, of the shape
    its axes have at the planning sizes (N0608 otherwise)."""
    from .masking import DATA_DTYPES, PlanningData
    inputs = {ir.op(diagram.ir, n).name: n for n in diagram.ir.nodes
              if isinstance(ir.op(diagram.ir, n), ir.Input)}
    out = {}
    for name, values in data.items():
        values = values.values if isinstance(values, PlanningData) else values
        n = inputs.get(name)
        if n is None or ir.op(diagram.ir, n).dtype not in DATA_DTYPES:
            usable = sorted(k for k, m in inputs.items()
                            if ir.op(diagram.ir, m).dtype in DATA_DTYPES)
            raise error("N0608", f"planning data for `{name}`, which is not an integer or "
                        "boolean input of the diagram",
                        help="data for planning is given for integer or boolean inputs: " +
                        (", ".join(usable) if usable else "this diagram has none"))
        axes = ir.type_of(diagram.ir, n).axes
        want = tuple(sizes[a] for a in axes)
        arr = np.asarray(values)
        if arr.shape != want or not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
            raise error("N0608", f"planning data for `{name}` has shape {arr.shape} and dtype "
                        f"{arr.dtype}; `{name}[{' '.join(axes)}]` is {want} at the planning "
                        "sizes", diagram.ir.nodes[n].get("span"),
                        help="give integer values of the input's shape at the sizes "
                        "planned for (--shape)")
        out[name] = PlanningData(name, arr.astype(np.int64))
    return out


def merged_data(g: DiGraph, data: dict, sizes: dict) -> dict:
    """Planning data shaped as the IR's inputs (merged axes: merge.py)."""
    from .masking import PlanningData
    sizes = merge.sizes_of(g, sizes)
    return {k: PlanningData(k, merge.shaped(g, v.values, ir.type_of(
        g, g.graph["inputs"][k]).axes, sizes)) for k, v in data.items()}


def check_engine(engine: str) -> str:
    from ..diagrams.diagnostics import one_of
    return one_of(engine, ENGINES, "engine")


def in_diagram(diagram: Diagram, fn):
    """Run a stage; its errors point into the diagram's source."""
    try:
        return fn()
    except NapkinError as exc:
        raise NapkinError(exc.diagnostics, diagram.source) from None


def merged_products(ir_graph: DiGraph, keep, free: bool, grouped=()) -> DiGraph | None:
    """The canonical IR with runs of a product's contracted axes merged for it alone, or None
    where no product has one: merged before canonicalize nests a contraction over three or
    more axes (which would leave one contracted axis), the rest nested after."""
    flat = separate_nested(canonicalize(ir_graph, keep, free=free, nest=False, grouped=grouped))
    local = merge_products(flat, keep)
    return None if local is flat else with_apart(separate_nested(nested_contractions(local)))


def prepare(diagram: Diagram, target: Target | str | None = None, shape: dict | None = None,
            overrides: dict | None = None, data: dict | None = None) -> Problem:
    """Stage `prepare`: canonical IR, planning sizes, resolved hints, and the values of
    integer or boolean inputs given for planning (`data`: name -> array; the model counts the
    chunks a mask read from them skips, masking.py)."""
    tgt = target if isinstance(target, Target) else load(target)
    sizes = planning_sizes(diagram, shape)

    def run():
        keep = {a.rpartition(":")[2] for kind in ("group", "stream", "split", "lanes")
                for a in (overrides or {}).get(kind, {})}       # (`--split dg:r=8`: r)
        grouped = set((overrides or {}).get("group", {}))
        merged = separate_nested(canonicalize(diagram.ir, keep, free=True, grouped=grouped))
        graphs = [separate_nested(canonicalize(diagram.ir, keep, grouped=grouped))]
        local = merged_products(diagram.ir, keep, False, grouped)   # merged for one product
        if local is not None:           # priced against the IR without them (fuse_kernels)
            graphs.insert(0, local)
        if merge.has_free(merged):      # priced against the IR without them (fuse_kernels)
            graphs.insert(0, merged_products(diagram.ir, keep, True, grouped) or merged)
        for g in graphs:
            if data:
                g.graph["data"] = merged_data(g, planning_data(diagram, sizes, data), sizes)
        return graphs, tuple(hint_mod.resolve(diagram.hints, overrides or {}, tgt, sizes))
    graphs, hints = in_diagram(diagram, run)
    axes = diagram.ir.graph["axes"]
    given = {axes[a].rep for a in (shape or {}) if a in axes}
    defaulted = tuple(a for a, info in axes.items() if info.size is None and info.rep not in given)
    problems = [Problem(diagram, g, tgt, merge.sizes_of(g, sizes), hints, defaulted)
                for g in graphs]
    for i in range(len(problems) - 2, -1, -1):     # each priced against the next (fuse_kernels)
        problems[i] = replace(problems[i], unmerged=problems[i + 1])
    return problems[0]


@fewer_full_collections()
def fuse_kernels(problem: Problem, engine: str = "auto", fusion: bool = True,
                 across: bool = True, runnable: bool = False) -> Fused:
    """Stage `fuse`: the kernels (one per equation without fusion), and the split of a reduced
    axis across blocks when one is hinted or predicted faster (splitting.py); `runnable`: of
    several statements only kernels the forced engine can run."""
    from .fuse import regroup, unfused_kernels
    check_engine(engine)

    planners: dict = {}     # id(problem) -> (problem, its planner): one per problem fused
    done: dict = {}         # id(problem) -> its fusion

    def fused(pr: Problem, like: Fused | None = None) -> Fused:
        """Fusion of `pr`; with `like`, the same statements grouped as in `like` (a split of
        another count: its kernels priced without searching the fusion again). The fusions
        of one problem share its planner (and so its memoised kernel plans)."""
        held = planners.get(id(pr))
        if held is None or held[0] is not pr:
            held = planners[id(pr)] = (pr, KernelPlanner(pr.graph, pr.target, pr.sizes,
                                                         pr.hints, engine, across=across,
                                                         runnable=runnable))
        planner = held[1]
        kernels = None if like is None else regroup(
            pr.graph, [(k.equations, k.recomputed) for k in like.kernels])
        if kernels is not None:
            return Fused(pr, tuple(kernels), planner)
        if id(pr) not in done or done[id(pr)].problem is not pr:   # (priced, then used)
            kernels, stored = in_diagram(pr.diagram, lambda: _fused_kernels(pr, planner)) \
                if fusion else (unfused_kernels(pr.graph), None)
            done[id(pr)] = Fused(pr, tuple(kernels), planner, stored16=stored)
        return done[id(pr)]
    problem = merge.priced(problem, fused, engine, splitting.total)
    rest, forced = splitting.split_hints(problem)
    found, choice = in_diagram(problem.diagram, lambda: splitting.choose(rest, fused, forced))
    return replace(found, split=choice)


def _fused_kernels(pr: Problem, planner):
    """(kernels, their Fused with the 16-bit storage decision applied or None): fuse.fuse
    priced on the 16-bit storage it anticipates (stored16_stages); again without it where the
    decision on the kernels it chose leaves one that no tiling fits. The decision checked is
    handed on (Fused.stored16): tiling reads it rather than making it again."""
    from .fuse import fuse
    pricing = stored16_stages.fusion_planner(pr, planner)
    kernels = tuple(fuse(pr.graph, pricing))
    if pricing is planner:
        return kernels, None
    final = stored16_stages.applied(Fused(pr, kernels, planner))
    if any(final.planner.plan(k, strict=False) is None for k in kernels):
        return tuple(fuse(pr.graph, planner)), None
    return kernels, final


def check_hints(diagram: Diagram) -> None:
    """The diagram's hints checked as planning reads them (a split hint splits a reduction:
    N0607 where none can merge), without planning: `napkin check`."""
    rest, forced = splitting.split_hints(prepare(diagram))
    in_diagram(diagram, lambda: splitting.forced_split(rest, forced))


def _forced_split_said(fused: Fused, fn):
    """fn(); a kernel no tiling fits (N0603) under a split the user asked for says so, and
    how to do without it (the split is theirs: the hint's span when it is in the diagram)."""
    try:
        return fn()
    except NapkinError as exc:
        split = fused.split
        d = exc.diagnostics[0]
        if split is None or not split.forced or d.code != "N0603":
            raise
        span = next((h.span for h in fused.problem.diagram.hints if h.kind == "split"), None)
        raise NapkinError(replace(
            d, span=d.span or span,
            notes=d.notes + (f"this kernel is the split of `{split.axis}` in {split.parts} "
                             "that was asked for",),
            help=f"split `{split.axis}` fewer ways, split another axis, or drop the split "
                 f"(`split {split.axis} by 1` in the diagram, no --split on the command "
                 "line)"), exc.source) from None


@fewer_full_collections()
def tile(fused: Fused, merge: str = "auto") -> Plan:
    """Stage `tile`: every kernel's schedule, cost and hints used; a split's merge in its
    own kernels or in the partial kernel's last blocks (`merge`: auto, kernel or last-block;
    last_block.py). Under `--engine tensor-cores`, a kernel fusion made as auto prices it and
    the engine refuses (N0606) is fused again of kernels the engine runs (`runnable`); where
    that fails too, the error whose help names a declaration, else the first."""
    try:
        return _tile(fused, merge)
    except NapkinError as exc:
        planner = fused.planner
        if planner.engine != "tensor-cores" or planner.runnable or exc.diagnostics[0].code != \
                "N0606" or all(len(k.equations) == 1 for k in fused.kernels):
            raise
        try:
            return _tile(fuse_kernels(fused.problem, planner.engine, across=planner.across,
                                      runnable=True), merge)
        except NapkinError as again:
            raise (again if (again.diagnostics[0].help or "").startswith("declare")
                   else exc) from None


def _tile(fused: Fused, merge: str) -> Plan:
    fused = in_diagram(fused.problem.diagram, lambda: stored16_stages.applied(fused))
    pr = fused.problem

    def run():
        plans = tuple(_forced_split_said(fused, lambda k=k: fused.planner.plan(k))
                      for k in fused.kernels)
        hint_mod.check_all_used(list(pr.hints), {h for p in plans for h in p.hints}, pr.graph,
                                list(fused.kernels))
        plans, tails = decide_tail(pr.graph, plans, fused.split, pr.sizes, pr.target, merge)
        return (*sibling_tiles.decide(pr.graph, plans, pr.sizes, pr.target, tails), tails)
    plans, launches, tails = in_diagram(pr.diagram, run)
    return Plan(pr.diagram, pr.graph, pr.target, pr.sizes, plans, fused.planner.engine,
                pr.defaulted, pr.hints, fused.split, tails, launches=launches)


def plan(diagram: Diagram, target: Target | str | None = None, shape: dict | None = None,
         overrides: dict | None = None, engine: str = "auto", fusion: bool = True,
         data: dict | None = None, merge: str = "auto", across: bool = True) -> Plan:
    """The plan for a diagram on a target: prepare, fuse, tile (see the module docstring);
    `across=False`: no chain adds a product over its rows across blocks (chain.Across).
    Dynamic axes that a faster lowering needs static are planned fixed (specialise.py)."""
    from .specialise import decided

    def planned(pr: Problem) -> Plan:
        return tile(fuse_kernels(pr, engine, fusion, across), merge)
    problem = prepare(diagram, target, shape, overrides, data)
    return decided(lambda: planned(problem), problem,
                   lambda d: planned(prepare(d, target, shape, overrides, data)))


def without_atomics(p: Plan) -> Plan:
    """The same problem planned with no chain adding a product over its rows across blocks
    (chain.Across), for comparison (explain)."""
    problem = Problem(p.diagram, stored16.with_decision(p.graph, {}), p.target, p.sizes,
                      p.hints, p.defaulted)      # (decided again for its own kernels)
    return replace(tile(fuse_kernels(problem, p.engine, across=False)),
                   specialised=p.specialised, unspecialised=p.unspecialised)


def baseline(p: Plan) -> tuple[KernelPlan, ...]:
    """The unfused plan of the same problem (one kernel per equation), for comparison; kernels
    that have no legal tiling on their own are left out."""
    from .fuse import unfused_kernels
    planner = KernelPlanner(p.graph, p.target, p.sizes, p.hints, p.engine)
    found = in_diagram(p.diagram, lambda: planner.planned(unfused_kernels(p.graph)))
    return tuple(kp for kp in found if kp is not None)
