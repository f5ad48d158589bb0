"""`napkin check FILE|NAME`: parse and check; print axes, inputs, outputs, equations."""

from __future__ import annotations

import click

from ..cli_common import diagram_options, load_diagram


@click.command("check")
@diagram_options
def command(diagram: str, sizes: dict[str, int]) -> None:
    """Parse and check a diagram, and summarise what it computes."""
    d = load_diagram(diagram, sizes)
    if any(h.kind == "split" for h in d.hints):   # a split that cannot merge is a mistake too
        from ..compiler.plan import check_hints   # (the planner's imports, only then: numpy)
        check_hints(d)
    click.echo(summary(d))


def summary(d) -> str:
    axes = d.ir.graph["axes"]
    lines = [f"{d.name}: ok"]
    shown = []
    for name, info in axes.items():
        size = str(info.size) if info.size is not None else "dynamic"
        tied = f" (= {info.rep})" if info.rep != name else ""
        shown.append(f"{name}={size}{tied}")
    lines.append("axes:    " + ", ".join(shown))
    lines.append("inputs:  " + ", ".join(f"{s.name}[{' '.join(s.axes)}]: {s.dtype}" for s in d.inputs))
    lines.append("outputs: " + ", ".join(f"{s.name}[{' '.join(s.axes)}]: {s.dtype}" for s in d.outputs))
    if d.hints:
        lines.append("hints:   " + ", ".join(
            f"{h.kind} {h.axis} by {h.size}" + (f" at {h.level}" if h.level else "") for h in d.hints))
    lines.append("equations:")
    width = max((len(e.name) + 2 + len(" ".join(e.axes)) for e in d.equations), default=0)
    for e in d.equations:
        parts = []
        if e.contracted:
            parts.append("contracts " + " ".join(e.contracted))
        if e.reduced:
            parts.append("reduces " + " ".join(e.reduced))
        if e.normalised:
            parts.append("softmax along " + " ".join(e.normalised))
        if e.broadcast:
            parts.append("broadcast along " + " ".join(e.broadcast))
        what = "; ".join(parts) if parts else "elementwise"
        head = f"{e.name}[{' '.join(e.axes)}]"
        lines.append(f"  {head.ljust(width)}  {what}   (line {e.span.line})")
    return "\n".join(lines)
