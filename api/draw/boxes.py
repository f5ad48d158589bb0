"""The body of each kind of box, between the wires that enter it and the wires that leave it.

- contraction: no box; each contracted wire runs to a junction where its
  partners meet (a dot), the other wires run on to the result;
- softmax: the triangle on each normalised wire, the woven wires pass straight by;
- reduction: a labelled box on the reduced wires, which end there; the woven
  wires pass around it;
- elementwise function, rename, copy: a labelled box that every wire passes
  through (all of them are woven);
- source: a labelled box the result's wires start from.

A result wire no operand feeds (an array repeated along an axis) starts at a dot.
"""

from __future__ import annotations

from . import text
from .model import Box
from .scene import FILL, MARK, TEXT, Curve, Dot, Polygon, Rect, Text


def body_width(box: Box, m, rise: float) -> float:
    """Wide enough for the label, and for the steepest wire (`rise`) to bend gently."""
    bend = min(110.0, 0.45 * rise)
    if box.kind == "contract":
        return max(56.0, 24.0 + 1.2 * bend)
    if box.kind == "softmax":
        return 40.0
    inner = max(24.0, text.width(box.label, m.box_size) + 2 * m.pad)
    if box.kind == "reduce":
        return inner + max(22.0, bend)
    return max(inner + 8.0, 16.0 + bend)


def draw(scene, box: Box, lay, operands, result_top: float, x0: float, x1: float) -> None:
    """Draws `box`'s body between x0 and x1; `operands` are (value, top) in the block."""
    tops = dict(operands)
    ins = [(ln, lay.wires(ln.value, tops[ln.value])[ln.axis]) for ln in box.links]
    outs = lay.wires(box.result, result_top)
    fed = {ln.to for ln in box.links if ln.to is not None}
    bend0, start = x0, (x0 + x1) / 2
    if box.kind == "reduce":
        bend0 = start = _reduce(scene, box, lay, ins, x0, x1)
    elif box.kind == "contract":
        bend0 = start = _joins(scene, box, lay, operands, ins, x0, x1)
    elif box.kind == "softmax":
        _triangles(scene, box, outs, x0, x1)
    else:
        ys = [y for v, top in operands for y in lay.wires(v, top).values()]
        _framed(scene, box, lay, ys + list(outs.values()), x0, x1)
        if box.kind == "source":
            start = x1 - 4
    fresh = box.kind != "source"   # a source makes every wire; elsewhere a dot marks a new one
    for ln, y in ins:
        if ln.to is not None:
            if bend0 > x0:
                scene.add(Curve("wire", x0, y, bend0, y, value=ln.value, axis=ln.axis))
            scene.add(Curve("wire", bend0, y, x1, outs[ln.to], value=box.result, axis=ln.to))
    for a, y in outs.items():
        if a not in fed:   # a scalar result, or an axis the result is repeated along
            scene.add(Curve("wire", start, y, x1, y, value=box.result, axis=a or None))
            if a and fresh:
                scene.add(Dot("branch", start, y, 2.5, value=box.result, axis=a, layer=MARK))


def _framed(scene, box: Box, lay, ys, x0: float, x1: float) -> None:
    m = lay.m
    top = min(ys) - m.pitch / 2 + 3
    bottom = max(ys) + m.pitch / 2 - 3
    scene.add(Rect("box", x0 + 4, top, x1 - x0 - 8, bottom - top, title=box.title,
                   value=box.result, layer=FILL))
    scene.add(Text("box-label", (x0 + x1) / 2, top - 5, box.label, anchor="middle",
                   size=m.box_size, layer=TEXT))


def _reduce(scene, box: Box, lay, ins, x0: float, x1: float) -> float:
    """Boxes on each run of adjacent reduced wires; returns where the woven wires may bend."""
    m = lay.m
    right = x1 - 18
    ended = sorted(y for ln, y in ins if ln.to is None)
    runs: list[list[float]] = []
    for y in ended:
        if runs and y - runs[-1][-1] <= m.pitch + 0.5:
            runs[-1].append(y)
        else:
            runs.append([y])
    for ln, y in ins:
        if ln.to is None:
            scene.add(Curve("wire", x0, y, x0 + 6, y, value=ln.value, axis=ln.axis))
    for run in runs:
        top = run[0] - m.pitch / 2 + 2
        h = run[-1] - run[0] + m.pitch - 4
        scene.add(Rect("box", x0 + 6, top, right - x0 - 6, h, title=box.title,
                       value=box.result, layer=FILL))
        scene.add(Text("box-label", (x0 + 6 + right) / 2, (run[0] + run[-1]) / 2 + m.box_size * 0.35,
                       box.label, anchor="middle", size=m.box_size, layer=TEXT))
    return right


def _joins(scene, box: Box, lay, operands, ins, x0: float, x1: float) -> float:
    """Contracted wires meet: each contracted axis's wires run to one dot, in the gap between
    the two arrays they come from, left of where the woven wires bend. Returns that x."""
    xj = x0 + (x1 - x0) * 0.45
    level = [y for ln, y in ins if ln.to is not None]
    tops = dict(operands)
    n = len(box.acts)
    for k, a in enumerate(box.acts):
        links = [(ln, y) for ln, y in ins if ln.to is None and ln.axis == a]
        if not links:
            continue
        owners = sorted(set(ln.value for ln, _ in links), key=tops.__getitem__)
        if len(owners) > 1:      # between the first array that has it and the next one
            yj = tops[owners[0]] + lay.height(owners[0]) + lay.m.gap / 2
        else:                    # one array contracted with itself
            yj = _clear(sum(y for _, y in links) / len(links), level)
        x = xj - 9.0 * (n - 1 - k)
        for ln, y in links:
            scene.add(Curve("wire", x0, y, x, yj, value=ln.value, axis=a))
        scene.add(Dot("join", x, yj, 3.0, title=box.title, axis=a, layer=MARK))
        level.append(yj)
    return xj


def _clear(y: float, rows: list[float], room: float = 7.0) -> float:
    """The point nearest `y` at least `room` away from every row in `rows`."""
    for k in range(200):
        for cand in (y + k, y - k):
            if all(abs(cand - r) >= room for r in rows):
                return cand
    return y  # pragma: no cover - 200 px of rows closer than `room` cannot happen


def _triangles(scene, box: Box, outs, x0: float, x1: float) -> None:
    """The paper's softmax: a triangle pointing back along each normalised wire."""
    cx = x0 + (x1 - x0) * 0.6
    for a in box.acts:
        y = outs[a]
        scene.add(Polygon("softmax", ((cx - 7, y), (cx + 7, y - 8), (cx + 7, y + 8)),
                          title=box.title, value=box.result, axis=a, layer=MARK))
