"""The front stages: text to syntax tree to checked graph IR (napkin.pipeline, the driver,
runs them)."""

from __future__ import annotations

from ..diagrams import ast, parser, sources
from ..diagrams.diagnostics import Source
from .build import build
from .cotangents import TITLE
from .diagram import Diagram
from .verify import verify


def parse(source: Source) -> ast.Program:
    """Text to syntax tree with source spans (lark LALR)."""
    return parser.parse(source)


def check(program: ast.Program, overrides: dict[str, int] | None = None) -> Diagram:
    """Syntax tree to the checked, typed graph IR (names, einsum rule, sizes, dtypes)."""
    graph, warnings = build(program, overrides)
    verify(graph)
    warnings = tuple(w.with_source(program.source) for w in warnings)
    if TITLE.match(program.source.text.split("\n", 1)[0]):
        # a gradient `napkin grad` wrote takes every forward input by contract, read or not
        # (read back from its file: api/gradient.py drops the same warnings as it derives it)
        warnings = tuple(w for w in warnings if w.code != "N0701")
    return Diagram(graph, program.source, warnings, tuple(sorted((overrides or {}).items())))


def load(arg, **sizes: int) -> Diagram:
    """Parse and check a diagram given as a path, a library name or its text; a Diagram as it
    is, or checked again with these sizes over its own."""
    if isinstance(arg, Diagram):
        return arg if not sizes else check(parse(arg.source), {**dict(arg.overrides), **sizes})
    return check(parse(sources.resolve(arg)), sizes)


__all__ = ["check", "load", "parse"]
