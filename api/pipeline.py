"""The driver: the stages as data, each a function from one artifact to the next.

    text --parse--> AST --check--> Diagram --fuse--> kernels --tile--> Plan
         --lower--> kernel program --render--> CUDA C --nvrtc--> PTX, cubin

Every entry point (`napkin compile/explain/run/draw/bench`, `napkin.compile`,
`Kernel`, the CPU backends) runs the stages through `through`, with one
frozen `Options` (target, arch, sizes, hints, engine, fusion) that is also
their cache key; no other module sequences plan -> lower -> render. Every
stage's artifact can be printed with `napkin compile --emit NAME`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Callable

from .compiler import target as targets
from .compiler.plan import ENGINES, check_engine


def _pairs(mapping) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(dict(mapping or {}).items()))


@dataclass(frozen=True)
class Options:
    """Everything a compile depends on (and so its cache key): one frozen object."""

    target: str | None = None                         # a target name (two-level:M=... too);
                                                      # None: the GPU's, else targets.DEFAULT
    arch: str | None = None                           # NVRTC's arch; None: the target's
    shape: tuple[tuple[str, int], ...] = ()           # planning sizes of dynamic axes
    defines: tuple[tuple[str, int], ...] = ()         # -D sizes the check stage fixes
    groups: tuple[tuple[str, int], ...] = ()          # --group hints (block level)
    streams: tuple[tuple[str, int], ...] = ()         # --stream hints
    splits: tuple[tuple[str, int], ...] = ()          # --split hints (splits across blocks)
    engine: str = "auto"                              # auto | tensor-cores | cuda-cores
    fusion: bool = True
    nvrtc_options: tuple[str, ...] = field(default=())
    data: tuple = ()                                  # (name, masking.PlanningData): values
                                                      # of integer inputs the model plans on
    merge: str = "auto"                               # a split's merge: auto | kernel |
                                                      # last-block (compiler/last_block.py)
    across: bool = True                               # False: no chain adds a product over
                                                      # its rows across blocks (chain.Across)
    lanes: tuple[tuple[str, int], ...] = ()           # --lanes hints (a reduced axis split
                                                      # over a block's lanes, Schedule.split)

    @classmethod
    def make(cls, target: str | None = None, arch: str | None = None, shape=None, defines=None,
             group=None, stream=None, engine: str = "auto", fusion: bool = True,
             nvrtc_options=(), split=None, data=None, merge: str = "auto",
             across: bool = True, lanes=None) -> "Options":
        """Options from plain values (dicts of sizes and hints; `data`: input name -> the
        values of an integer or boolean input to plan on), checked."""
        if target is not None:
            targets.load(target)               # N0605 now, not at the first plan
        if arch is not None:
            from .runtime.nvrtc import validate_arch
            validate_arch(arch)
        from .compiler.masking import PlanningData
        planning = tuple(sorted((k, v if isinstance(v, PlanningData) else PlanningData(k, v))
                                for k, v in dict(data or {}).items()))
        from .compiler.last_block import check_mode
        return cls(target, arch, _pairs(shape), _pairs(defines),
                   _pairs(group), _pairs(stream), _pairs(split), check_engine(engine),
                   bool(fusion), tuple(nvrtc_options), planning, check_mode(merge),
                   bool(across), _pairs(lanes))

    def with_shape(self, shape) -> "Options":
        return replace(self, shape=_pairs(shape))

    @property
    def overrides(self) -> dict:
        return {"group": dict(self.groups), "stream": dict(self.streams),
                "split": dict(self.splits), "lanes": dict(self.lanes)}

    @property
    def target_name(self) -> str:
        """The target planned for: the one given, with the arch given when it differs from the
        target's (`h100:arch=sm_90`: the plan then uses only what that arch has, mma.sync and
        not wgmma)."""
        name = self.target or targets.DEFAULT
        if self.arch and self.arch != targets.load(name).arch:
            return f"{name}{',' if ':' in name else ':'}arch={self.arch}"
        return name

    def arch_for(self, target) -> str:
        """The arch to compile for: the one given, else the target's (sm_90 for a model)."""
        return self.arch or (target.arch if target.arch.startswith("sm_") else "sm_90")


# -- the stages -------------------------------------------------------------------------------

def _parse(arg, options: Options):
    from .compiler.front import parse
    from .diagrams import sources
    return parse(sources.resolve(arg))


def _check(tree, options: Options):
    from .compiler.front import check
    return check(tree, dict(options.defines))


def _fuse(diagram, options: Options):
    from .compiler.plan import fuse_kernels, prepare
    from .compiler.shape_option import by_size_class
    by_size_class(diagram.ir.graph["axes"], dict(options.shape))
    problem = prepare(diagram, options.target_name, dict(options.shape), options.overrides,
                      dict(options.data))
    return fuse_kernels(problem, options.engine, options.fusion, options.across)


def _tile(fused, options: Options):
    """The plan of the fused kernels, or of the diagram with the dynamic axes a faster
    lowering needs static fixed (compiler/specialise.py: the plan records which)."""
    from .compiler.plan import tile
    from .compiler.specialise import decided
    return decided(lambda: tile(fused, options.merge), fused.problem,
                   lambda diagram: tile(_fuse(diagram, options), options.merge))


def _lower(plan, options: Options):
    from .codegen.lower import lower
    return lower(plan)


def _render(program, options: Options):
    from .codegen.render import render
    return render(program)


def _compile(source: str, options: Options, cache=None):
    """PTX, cubin and ptxas's report for the exact arch (NVRTC, through the disk cache)."""
    from .runtime import binaries
    arch = options.arch_for(targets.load(options.target_name))
    return binaries.get(source, arch, options.nvrtc_options, cache=cache)


def _show_ast(tree) -> str:
    return "\n".join(repr(s) for s in tree.statements) + "\n"


def _show_ir(diagram) -> str:
    from .compiler.printer import format_ir
    return format_ir(diagram.ir)


def _show_kernels(fused) -> str:
    equations = fused.problem.graph.graph["equations"]     # a split's partial sides too
    lines = []
    for k in fused.kernels:
        eqs = ", ".join(e.name for e in equations if e.stmt in k.equations)
        again = ", ".join(e.name for e in equations if e.stmt in k.recomputed)
        lines.append(f"{k.name}: {eqs}" + (f" (recomputes {again})" if again else ""))
        if k.reason:
            lines.append(f"  boundary: {k.reason}")
    return "\n".join(lines) + "\n"


def _show_plan(plan) -> str:
    from .explain import report
    return json.dumps(report(plan), indent=2) + "\n"


def _show_program(program) -> str:
    from .codegen.show import show
    return show(program)


@dataclass(frozen=True)
class Stage:
    name: str                                   # the artifact's name
    doc: str
    run: Callable                               # (previous artifact, Options) -> artifact
    emits: tuple[tuple[str, Callable], ...]     # --emit names and how each prints


STAGES: tuple[Stage, ...] = (
    Stage("ast", "syntax tree with source spans", _parse, (("ast", _show_ast),)),
    Stage("ir", "checked graph IR: axes, dtypes, contractions resolved", _check,
          (("ir", _show_ir),)),
    Stage("kernels", "the fused kernels and why each boundary is there", _fuse,
          (("kernels", _show_kernels),)),
    Stage("plan", "per kernel a checked schedule: engine, groups, streams, tiles, warps; M, H "
          "and predicted time (JSON)", _tile, (("plan", _show_plan),)),
    Stage("program", "the kernel program the templates print", _lower,
          (("program", _show_program),)),
    Stage("cuda", "CUDA C", _render, (("cuda", lambda text: text),)),
    Stage("binary", "PTX and cubin from NVRTC, and ptxas's report", _compile,
          (("ptx", lambda b: b.ptx), ("cubin", lambda b: b.cubin))),
)
_INDEX = {s.name: i for i, s in enumerate(STAGES)}


def emit_names() -> list[str]:
    return [name for s in STAGES for name, _ in s.emits]


def stage_of(emit: str) -> Stage:
    return next(s for s in STAGES if emit in dict(s.emits))


def through(artifact, after: str | None, until: str, options: Options, cache=None) -> dict:
    """Run the stages after the one named `after` (None: start from a diagram's path, name or
    text) up to and including `until`; every artifact made, by stage name."""
    start = 0 if after is None else _INDEX[after] + 1
    out = {}
    for s in STAGES[start:_INDEX[until] + 1]:
        extra = (cache,) if s.name == "binary" else ()     # (NVRTC's disk cache)
        artifact = s.run(artifact, options, *extra)
        out[s.name] = artifact
    return out


def emit(arg, name: str, options: Options):
    """(artifact `name` as text or bytes, warnings) for a diagram given as path, name or text."""
    stage = stage_of(name)
    made = through(arg, None, stage.name, options)
    warnings = made["ir"].warnings if "ir" in made else ()
    return dict(stage.emits)[name](made[stage.name]), warnings


def plan(diagram, options: Options):
    """The plan of a checked diagram."""
    return through(diagram, "ir", "plan", options)["plan"]


def source(diagram, options: Options) -> tuple:
    """(plan, kernel program, CUDA C) of a checked diagram."""
    made = through(diagram, "ir", "cuda", options)
    return made["plan"], made["program"], made["cuda"]


def lowered(plan) -> tuple:
    """(kernel program, CUDA C) of a plan made elsewhere (with_choices, the fuzzers)."""
    made = through(plan, "plan", "cuda", Options())
    return made["program"], made["cuda"]


def run_plan(plan, inputs: dict, sizes: dict, sanitize: str = "none", timeout_s: float = 300.0,
             edit=None) -> dict:
    """Outputs by name, as the emitted kernels of `plan` compute them on the CPU emulator (in
    storage dtypes). `edit` rewrites the CUDA text first (seeded bugs: it must change it)."""
    from .runtime.emulated import run_program
    program, text = lowered(plan)
    if edit is not None:
        edited = edit(text)
        if edited == text:
            raise ValueError("the edit did not change the kernel source")
        text = edited
    return run_program(plan, program, text, inputs, sizes, sanitize=sanitize, timeout_s=timeout_s)


__all__ = ["Options", "STAGES", "Stage", "ENGINES", "emit", "emit_names", "through", "plan",
           "source", "lowered", "run_plan"]
