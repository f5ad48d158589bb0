"""Places a `Structure` on the page: columns left to right, tuples of wire stacks top to bottom.

Horizontally the picture is: the inputs' stub (wire labels), then for each
column a *transition* (where wires bend to their new rows, copies branch and
operands gather), the box *body*, and a *stub* where the box's result is
labelled; then a last transition to the outputs, in declaration order.
Vertically each side of a column is a tuple of arrays, each array a header
(its name) over one row per wire, arrays separated by a gap that holds the
tuple's dashed line. The box sits where its topmost operand was; a box's block
is as tall as the larger of its operands' stack and its result, so the arrays
passing by keep their rows through the column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import boxes, text
from .model import Column, Structure
from .scene import MARK, TEXT, Curve, Dot, Frame, Scene, Text


@dataclass(frozen=True)
class Metrics:
    pitch: float = 20.0        # between two wires of an array
    head: float = 20.0         # above an array's first wire: its name
    gap: float = 12.0          # between two arrays of a tuple
    margin: float = 16.0
    caption: float = 26.0      # the diagram's name, above everything
    pad: float = 6.0
    label_size: float = 10.0   # wire labels
    name_size: float = 12.0    # array names
    box_size: float = 11.0     # box labels
    caption_size: float = 13.0
    kernel_gap: float = 30.0   # global memory between two kernels (the planned picture)


Side = list[tuple[int, float]]   # (value id, top y) per array, top to bottom


class Layout:
    def __init__(self, s: Structure, m: Metrics | None = None, gaps=()):
        self.s = s
        self.m = m or Metrics()
        self.gaps = set(gaps)      # columns preceded by a stretch of global memory
        self.top = self.m.margin + self.m.caption
        self.bottom = self.top

    # --- vertical -------------------------------------------------------------------
    def rows(self, v: int) -> tuple[str, ...]:
        """The wires drawn for value `v`; a scalar gets one row (labelled `scalar`)."""
        return self.s.values[v].axes or ("",)

    def height(self, v: int) -> float:
        return self.m.head + len(self.rows(v)) * self.m.pitch

    def wire_y(self, top: float, i: int) -> float:
        return top + self.m.head + self.m.pitch * (i + 0.5)

    def wires(self, v: int, top: float) -> dict[str, float]:
        return {a: self.wire_y(top, i) for i, a in enumerate(self.rows(v))}

    def stack(self, values, y: float, prev: dict[int, float] | None = None) -> tuple[Side, float]:
        side = []
        for v in values:
            if prev:
                y = max(y, prev.get(v, y))
            side.append((v, y))
            y += self.height(v) + self.m.gap
        return side, y

    def column_sides(self, c: Column, prev: dict[int, float]):
        """Left side, the box's operands (where they enter it) and right side.

        An array keeps its row from the previous column unless something above
        pushes it down, so arrays passing by run straight; the block sits at its
        topmost operand's row and the other operands are gathered under it.
        """
        left: Side = []
        right: Side = []
        operands: Side = []
        y = self.top
        for v in c.rows:
            if v is not None:
                y = max(y, prev.get(v, y))
                left.append((v, y))
                right.append((v, y))
                y += self.height(v) + self.m.gap
                continue
            if c.stack and c.stack[0] not in c.rows:
                y = max(y, prev.get(c.stack[0], y))
            operands, end = self.stack(c.stack, y)
            used = (end - self.m.gap - y) if c.stack else 0.0
            left.extend(operands)
            right.append((c.box.result, y))
            y += max(used, self.height(c.box.result)) + self.m.gap
        self.bottom = max(self.bottom, y - self.m.gap)
        return left, operands, right

    def steepest(self, c: Column, operands: Side, right: Side) -> float:
        """The largest rise or fall of a wire inside the box (wider boxes for steeper wires)."""
        tops = dict(operands)
        outs = self.wires(c.box.result, dict(right)[c.box.result])
        rises = [abs(self.wires(ln.value, tops[ln.value])[ln.axis] - outs[ln.to])
                 for ln in c.box.links if ln.to is not None]
        return max(rises, default=0.0)

    # --- text -----------------------------------------------------------------------
    def wire_label(self, axis: str, v: int | None = None) -> str:
        return self.s.label(axis, v) if axis else "scalar"

    def header(self, v: int) -> str:
        """An array's name over its wires; an input's with its dtype."""
        value = self.s.values[v]
        name = value.name or ""
        return f"{name} : {value.dtype}" if name and value.dtype else name

    def stub_width(self, entries, inside: bool = False) -> float:
        """`inside`: a box's result, labelled as it lives there (relabelled per value)."""
        m = self.m
        widest = 0.0
        for v, head in entries:
            widest = max(widest, text.width(head, m.name_size),
                         *(text.width(self.wire_label(a, v if inside else None), m.label_size)
                           for a in self.rows(v)))
        return max(28.0, widest + 2 * m.pad)

    def labels(self, scene: Scene, v: int, top: float, x: float, head: str,
               inside: bool = False) -> None:
        m = self.m
        if head:
            scene.add(Text("array-label", x, top + m.head - 6, head, size=m.name_size,
                           value=v, layer=TEXT))
        for i, a in enumerate(self.rows(v)):
            scene.add(Text("axis-label", x, self.wire_y(top, i) - 5,
                           self.wire_label(a, v if inside else None),
                           size=m.label_size, value=v, axis=a or None, layer=TEXT))

    # --- horizontal -----------------------------------------------------------------
    def straight(self, scene: Scene, side: Side, x1: float, x2: float) -> None:
        for v, top in side:
            for a, y in self.wires(v, top).items():
                scene.add(Curve("wire", x1, y, x2, y, value=v, axis=a or None))

    def separators(self, scene: Scene, side: Side, x1: float, x2: float, near=None) -> None:
        """Dashed lines between the arrays of a tuple; after a box, only between its result and
        an array right next to it."""
        for (v, top), (w, below) in zip(side, side[1:]):
            bottom = top + self.height(v)
            if near is None or (near in (v, w) and below - bottom <= self.m.gap + 0.5):
                y = (bottom + below) / 2
                scene.add(Curve("separator", x1, y, x2, y))

    def caps(self, scene: Scene, side: Side, ends, x: float) -> None:
        for v, top in side:
            if v in ends:
                for a, y in self.wires(v, top).items():
                    scene.add(Dot("cap", x, y, 2.5, value=v, axis=a or None, layer=MARK))

    def transition(self, scene: Scene, before: Side, after: Side, x: float) -> float:
        """Wires bend from `before` to `after`; returns the transition's width."""
        moves = []
        for v, top in before:
            dests = [t for w, t in after if w == v]
            for a, y1 in self.wires(v, top).items():
                for t in dests:
                    moves.append((v, a, y1, self.wires(v, t)[a]))
                if len(dests) > 1:
                    scene.add(Dot("branch", x, y1, 2.5, value=v, axis=a or None, layer=MARK))
        dy = max((abs(y2 - y1) for *_, y1, y2 in moves), default=0.0)
        w = 16.0 if dy == 0 else min(90.0, max(28.0, 20.0 + 0.35 * dy))
        for v, a, y1, y2 in moves:
            scene.add(Curve("wire", x, y1, x + w, y2, value=v, axis=a or None))
        return w

    def place(self) -> Scene:
        s, m = self.s, self.m
        scene = Scene(0, 0, s.name)
        scene.add(Text("caption", m.margin, m.margin + m.caption_size, s.name,
                       size=m.caption_size, layer=TEXT))
        inputs, y = self.stack(s.inputs, self.top)
        self.bottom = max(self.bottom, y - m.gap)
        x = m.margin
        heads = {v: self.header(v) for v in s.inputs}
        w = self.stub_width([(v, heads[v]) for v in s.inputs])
        self.straight(scene, inputs, x, x + w)
        self.separators(scene, inputs, x, x + w)
        for v, top in inputs:
            self.labels(scene, v, top, x + 2, heads[v])
        x += w
        self.caps(scene, inputs, s.unused_inputs, x)
        prev = inputs
        for k, c in enumerate(s.columns):
            if k in self.gaps:
                self.straight(scene, prev, x, x + m.kernel_gap)
                x += m.kernel_gap
            x0, before = x, tuple(prev)
            left, operands, right = self.column_sides(c, dict(prev))
            x += self.transition(scene, prev, left, x)
            body = boxes.body_width(c.box, m, self.steepest(c, operands, right))
            passing = [(v, t) for v, t in right if v != c.box.result]
            result_top = dict(right)[c.box.result]
            head = self.header(c.box.result)
            # the last box's result, when it is an output, is labelled once: at the outputs
            labelled = c is not s.columns[-1] or c.box.result not in {o.value for o in s.outputs}
            stub = self.stub_width([(c.box.result, head)], inside=True) if labelled else 12.0
            self.straight(scene, passing, x, x + body + stub)
            boxes.draw(scene, c.box, self, operands, result_top, x, x + body)
            x += body
            self.straight(scene, [(c.box.result, result_top)], x, x + stub)
            self.separators(scene, right, x, x + stub, near=c.box.result)
            if labelled:
                self.labels(scene, c.box.result, result_top, x + m.pad, head, inside=True)
            x += stub
            self.caps(scene, right, c.ends, x)
            prev = [(v, t) for v, t in right if v not in c.ends]
            scene.frames.append(Frame(x0, x, before, tuple(prev)))
        outs, y = self.stack([o.value for o in s.outputs], self.top, dict(prev))
        self.bottom = max(self.bottom, y - m.gap)
        x += self.transition(scene, prev, outs, x)
        heads = [f"{o.name} : {o.dtype}" for o in s.outputs]
        w = self.stub_width([(o.value, h) for o, h in zip(s.outputs, heads)])
        self.straight(scene, outs, x, x + w)
        self.separators(scene, outs, x, x + w)
        for (v, top), h in zip(outs, heads):
            self.labels(scene, v, top, x + m.pad, h)
        x += w
        caption = m.margin + text.width(s.name, m.caption_size)
        scene.width = math.ceil(max(x, caption) + m.margin)    # whole pixels: PNGs match exactly
        scene.height = math.ceil(self.bottom + m.margin)
        return scene


def layout(s: Structure, metrics: Metrics | None = None, gaps=()) -> Scene:
    """`gaps`: indices of columns to precede by a stretch of global memory (`kernel_gap`)."""
    return Layout(s, metrics, gaps).place()
