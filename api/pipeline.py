"""The driver: one readable list of stages, each a function from one artifact to the next.

    text --parse--> AST --check--> graph IR --fuse--> kernels --plan--> Plan
         --lower--> kernel program --render--> CUDA C --NVRTC--> PTX, cubin

Every stage's artifact can be printed with `napkin compile --emit NAME`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .codegen.lower import lower
from .codegen.render import render
from .codegen.show import show
from .compiler.diagram import Diagram
from .explain import report
from .compiler.pipeline import check, parse
from .compiler.plan import Plan
from .compiler.plan import plan as make_plan
from .compiler.printer import format_ir
from .diagrams import sources


@dataclass(frozen=True)
class Options:
    """Everything a compile depends on (and so its cache key): one frozen object."""

    target: str | None = None
    shape: tuple[tuple[str, int], ...] = ()          # planning sizes of dynamic axes
    groups: tuple[tuple[str, int], ...] = ()
    streams: tuple[tuple[str, int], ...] = ()
    arch: str = "sm_90"
    nvrtc_options: tuple[str, ...] = field(default=())
    tensor_cores: bool = True                         # contractions may run on mma.sync


def plan(diagram: Diagram, options: Options) -> Plan:
    """Kernels (fusion) and, per kernel, groups, streams and tiles for the target."""
    overrides = {"group": dict(options.groups), "stream": dict(options.streams)}
    return make_plan(diagram, options.target, dict(options.shape), overrides,
                     tensor_cores=options.tensor_cores)


def compiled(source: str, options: Options):
    """PTX and cubin for the exact arch, through NVRTC (no GPU needed)."""
    from .runtime import nvrtc
    return nvrtc.compile(source, arch=options.arch, options=options.nvrtc_options)


@dataclass(frozen=True)
class Stage:
    name: str          # the --emit name of its artifact
    doc: str


STAGES: list[Stage] = [
    Stage("ast", "syntax tree with source spans"),
    Stage("ir", "checked graph IR: axes, dtypes, contractions resolved"),
    Stage("kernels", "the fused kernels and why each boundary is there"),
    Stage("plan", "groups, streams and tiles per level, M, H and predicted time (JSON)"),
    Stage("program", "the kernel program the templates print"),
    Stage("cuda", "CUDA C"),
    Stage("ptx", "PTX from NVRTC"),
    Stage("cubin", "cubin from NVRTC (binary)"),
]


def emit_names() -> list[str]:
    return [s.name for s in STAGES]


def run_until(arg, emit: str, sizes: dict[str, int], options: Options):
    """(artifact of stage `emit` as text or bytes, warnings) for a diagram."""
    tree = parse(sources.resolve(arg))
    if emit == "ast":
        return "\n".join(repr(s) for s in tree.statements) + "\n", ()
    diagram = check(tree, sizes)
    if emit == "ir":
        return format_ir(diagram.ir), diagram.warnings
    p = plan(diagram, options)
    if emit == "kernels":
        lines = []
        for kp in p.kernels:
            eqs = ", ".join(e.name for e in diagram.equations if e.stmt in kp.kernel.equations)
            lines.append(f"{kp.kernel.name}: {eqs}")
            if kp.kernel.reason:
                lines.append(f"  boundary: {kp.kernel.reason}")
        return "\n".join(lines) + "\n", diagram.warnings
    if emit == "plan":
        return json.dumps(report(p), indent=2) + "\n", diagram.warnings
    prog = lower(p)
    if emit == "program":
        return show(prog), diagram.warnings
    text = render(prog)
    if emit == "cuda":
        return text, diagram.warnings
    result = compiled(text, options)
    if emit == "ptx":
        return result.ptx, diagram.warnings
    return result.cubin, diagram.warnings
