"""`napkin draw`: a diagram as a picture, in the style of neural circuit diagrams.

The picture is computed from the graph IR in three steps, each its own module:

    model.structure(diagram)   what is drawn: arrays, boxes, columns, tuples   (model.py)
    layout.layout(structure)   where: shapes with positions and tags          (layout.py, boxes.py)
    svg.to_svg(scene, style)   how it looks, written as SVG text               (style.py, svg.py)

A later pass (the planned picture: arrays coloured by memory level, axes
relabelled g_q / s_x, transfers marked) slots in between: it changes labels in
the structure before layout (`Structure.relabel`) and supplies a `Style` that
colours shapes by their `value` tag (`Style.array_colour`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

from .layout import Metrics, layout
from .model import Structure, structure
from .scene import Scene
from .style import Style
from .svg import to_svg

__all__ = ["draw", "display_name", "Metrics", "Scene", "Structure", "Style", "layout",
           "structure", "to_svg"]


def display_name(name: str) -> str:
    """`<library:attention>` -> `attention`; a path -> its file name."""
    if name.startswith("<library:") and name.endswith(">"):
        return name[len("<library:"):-1]
    if name.startswith("<"):
        return name
    return PurePath(name).name


def draw(diagram, *, style: Style | None = None, metrics: Metrics | None = None) -> str:
    """The diagram as SVG text (deterministic: the same diagram gives the same bytes)."""
    s = structure(diagram)
    s = replace(s, name=display_name(s.name))
    scene = layout(s, metrics)
    sig = lambda sigs: ", ".join(f"{a.name}[{' '.join(a.axes)}]: {a.dtype}" for a in sigs)  # noqa: E731
    desc = f"{s.name}: ({sig(diagram.inputs)}) -> ({sig(diagram.outputs)})"
    return to_svg(scene, style, desc)
