"""`Diagram`: a parsed and checked diagram, what `napkin.load` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import DiGraph

from ..diagrams.diagnostics import Diagnostic, Source
from . import ir


@dataclass(frozen=True)
class ArraySig:
    """An input or output as callers see it: name, axes in layout order, storage dtype."""

    name: str
    axes: tuple[str, ...]
    dtype: str


@dataclass(frozen=True, eq=False)
class Diagram:
    ir: DiGraph
    source: Source
    warnings: tuple[Diagnostic, ...] = ()
    overrides: tuple[tuple[str, int], ...] = field(default=())

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def inputs(self) -> tuple[ArraySig, ...]:
        g = self.ir
        return tuple(ArraySig(name, ir.type_of(g, n).axes, ir.op(g, n).dtype)
                     for name, n in g.graph["inputs"].items())

    @property
    def outputs(self) -> tuple[ArraySig, ...]:
        g = self.ir
        return tuple(ArraySig(name, ir.type_of(g, n).axes, ir.op(g, n).dtype)
                     for name, n in g.graph["outputs"].items())

    @property
    def axes(self) -> dict[str, int | None]:
        """Every declared axis and its static size (None: read from the inputs)."""
        return {name: a.size for name, a in self.ir.graph["axes"].items()}

    @property
    def equations(self) -> tuple[ir.EquationInfo, ...]:
        return self.ir.graph["equations"]

    @property
    def hints(self) -> tuple[ir.HintInfo, ...]:
        return self.ir.graph["hints"]

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}[{' '.join(s.axes)}]: {s.dtype}" for s in self.inputs)
        outs = ", ".join(f"{s.name}[{' '.join(s.axes)}]: {s.dtype}" for s in self.outputs)
        return f"<Diagram {self.name}: ({ins}) -> ({outs})>"
