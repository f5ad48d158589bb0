"""The statistics a saved gradient reads: the forward diagram with each softmax's row
logsumexp as an extra output (`napkin.statistics`), and which of its outputs each extra
input of the saved gradient takes (`napkin.torch`'s backward)."""

from __future__ import annotations

from . import ir
from .diagram import Diagram
from .grad import _forward, _setup
from .gradtext import header, strip


def saved_sources(d: Diagram, wrt: tuple[str, ...] | None = None) -> tuple[tuple[str, str], ...]:
    """For the saved gradient of `wrt` (default: every input; `gradient_text(d, wrt,
    saved=True)`): each extra input's name and the output of `statistics_text(d)` it takes,
    in input order."""
    sw, _, _, _ = _setup(d, wrt, True)
    return tuple((name, sw.sources[name]) for name, _, _ in sw.extra_inputs)


def statistics_text(d: Diagram) -> str:
    """The forward diagram with, as extra f32 outputs, the row logsumexp of every softmax
    (named as `gradient_text(..., saved=True)` reads them)."""
    sw, _, _, _ = _setup(d, None, True)
    g = sw.g         # (a softmax written out is one node there, canonical.py: its row is saved)
    lse, sw.lse = sw.lse, {}
    for n in g.nodes:
        if isinstance(ir.op(g, n), ir.Assign):
            sw.needed.add(n)
    extra = []
    for n, name in lse.items():
        op = ir.op(g, n)
        row = tuple(a for a in sw.axes(n) if a not in op.axes)
        extra.append(f"{name}[{' '.join(row)}] = logsumexp[{' '.join(op.axes)}]"
                     f"({strip(sw.value(ir.operands(g, n)[0]))})")
    lines = header(sw.g, f"{d.name} with the statistics its saved gradient reads (napkin grad --saved).", "")
    lines += ["", *_forward(sw), *extra, ""]
    outs = [f"{name}: {ir.op(g, n).dtype}" for name, n in g.graph["outputs"].items()]
    lines.append("out " + ", ".join(outs + [f"{name}: f32" for name in lse.values()]))
    return "\n".join(lines) + "\n"
