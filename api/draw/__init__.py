"""`napkin draw`: a diagram as a picture, in the style of neural circuit diagrams.

The picture is computed from the graph IR in three steps, each its own module:

    model.structure(diagram)   what is drawn: arrays, boxes, columns, tuples   (model.py)
    layout.layout(structure)   where: shapes with positions and tags          (layout.py, boxes.py)
    svg.to_svg(scene, style)   how it looks, written as SVG text               (style.py, svg.py)

The planned picture (`draw_plan`) runs the same steps on a plan: the columns are grouped by
kernel (`structure(..., key=)`), wires a box makes are relabelled at the level their array
lives at (`Structure.relabel_values`), kernels are separated by global memory (`layout(...,
gaps=)`); then every array shape is coloured by its level, kernels, loads and stores are
marked (planned.py) and the legend and the table of M and H go underneath (table.py).
The roofline plot of `napkin explain --plot` is roofline.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

from .layout import Layout, Metrics, layout
from .model import Structure, structure
from .planned import BAND, Placement, decorate, gaps, order_key
from .scene import Scene
from .style import LEVEL_COLOURS, PlannedStyle, Style
from .svg import to_svg

__all__ = ["draw", "draw_plan", "plan_scene", "display_name", "LEVEL_COLOURS", "Metrics", "PlannedStyle",
           "Scene", "Structure", "Style", "layout", "structure", "to_svg"]


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
    return to_svg(scene, style, _signature(s.name, diagram))


def _signature(name: str, diagram) -> str:
    sig = lambda sigs: ", ".join(f"{a.name}[{' '.join(a.axes)}]: {a.dtype}" for a in sigs)  # noqa: E731
    return f"{name}: ({sig(diagram.inputs)}) -> ({sig(diagram.outputs)})"


def draw_plan(plan, *, report: dict | None = None, style: Style | None = None,
              metrics: Metrics | None = None) -> str:
    """The planned picture of `plan` as SVG text (deterministic): arrays coloured by the memory
    level they live at, axes relabelled, kernels, loads and stores marked, and the table of
    M and H per column underneath. `report`: the plan's explain report, if already made."""
    if report is None:
        from ..explain import report as explain
        report = explain(plan, compare=False)
    scene = plan_scene(plan, report, metrics)
    desc = (_signature(scene.title, plan.diagram) + f"; {len(report['kernels'])} kernel(s), "
            f"{report['H_bytes']:.6g} bytes of global traffic")
    return to_svg(scene, style or PlannedStyle(), desc)


def plan_scene(plan, report: dict, metrics: Metrics | None = None) -> Scene:
    """The planned picture's shapes (`draw_plan` writes them as SVG)."""
    d = plan.diagram
    placement = Placement(plan, report, d)
    s = structure(d, key=order_key(placement))
    s = replace(s, name=f"{display_name(s.name)} on {report['target']}", sizes=dict(plan.sizes),
                relabel_values=placement.relabel_values())
    m = metrics or Metrics(caption=Metrics().caption + BAND)
    lay = Layout(s, m, gaps(s, placement))
    scene = lay.place()
    decorate(scene, s, placement, lay, band_top=m.margin + m.caption - BAND - 2)
    from . import table     # the cost model: loaded for planned pictures only
    table.add(scene, plan, report, m.margin)
    return scene
