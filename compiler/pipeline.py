"""The driver: one readable list of stages, each a function from one artifact to the next.

    text --parse--> AST --build--> graph IR (checked, verified) --> ...

Later stages (fuse, plan, lower, render, compile) append to `STAGES`; every
stage's artifact can be printed with `napkin compile --emit NAME`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..diagrams import ast, parser, sources
from ..diagrams.diagnostics import Source
from .build import build
from .diagram import Diagram
from .printer import format_ir
from .verify import verify


def parse(source: Source) -> ast.Program:
    """Text to syntax tree with source spans (lark LALR)."""
    return parser.parse(source)


def check(program: ast.Program, overrides: dict[str, int] | None = None) -> Diagram:
    """Syntax tree to the checked, typed graph IR (names, einsum rule, sizes, dtypes)."""
    graph, warnings = build(program, overrides)
    verify(graph)
    warnings = tuple(w.with_source(program.source) for w in warnings)
    return Diagram(graph, program.source, warnings, tuple(sorted((overrides or {}).items())))


@dataclass(frozen=True)
class Stage:
    name: str          # the --emit name of its artifact
    run: Callable
    doc: str
    show: Callable     # artifact -> text


def _show_ast(program: ast.Program) -> str:
    return "\n".join(repr(s) for s in program.statements) + "\n"


STAGES: list[Stage] = [
    Stage("ast", parse, "syntax tree with source spans", _show_ast),
    Stage("ir", check, "checked graph IR: axes, dtypes, contractions resolved",
          lambda d: format_ir(d.ir)),
]


def load(arg, **sizes: int) -> Diagram:
    """Parse and check a diagram given as a path, a library name or its text."""
    return check(parse(sources.resolve(arg)), sizes)


def emit_names() -> list[str]:
    return [s.name for s in STAGES]
