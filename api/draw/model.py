"""What a picture shows, before any geometry: its arrays, its boxes, and the order of both.

The graph IR becomes a sequence of *columns*, read left to right. Each column
holds one box (an op of the IR); the arrays alive between two columns form a
tuple, a vertical stack of arrays, each a stack of wires (its axes). Nodes that
only rename an array (`Y = <op>`, identity views, outputs) are not boxes: they
name or alias the value of the node they wrap. Constant expressions that hold
no array data (`sqrt(size(d))`, `1e-5`, the mask `x <= q`) are folded into the
label of the elementwise box that uses them; anywhere else they become a
*source* box, a column that makes an array from nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..compiler.graph import DiGraph

from ..compiler import ir
from . import text

# Box kinds. Contract, softmax and reduce act on some wires (`Box.acts`) and weave the rest.
KINDS = ("contract", "map", "reduce", "softmax", "relabel", "source", "copy")


@dataclass(frozen=True)
class Value:
    """An array as a stack of wires (axes, top to bottom)."""

    id: int                    # the IR node that computes it; aliases collapse onto it
    axes: tuple[str, ...]
    name: str | None           # array name (input or equation); None for an intermediate
    dtype: str | None = None   # storage dtype of an input


@dataclass(frozen=True)
class Link:
    """One wire entering a box: operand `value`'s wire `axis` becomes result wire `to`."""

    value: int
    axis: str
    to: str | None             # None: the box ends it (contracted, reduced)


@dataclass(frozen=True)
class Box:
    kind: str                  # one of KINDS
    node: int
    label: str                 # text drawn on the box ("" for contractions)
    title: str                 # what the box does, in words (the SVG tooltip)
    operands: tuple[int, ...]  # value ids, distinct
    result: int                # value id
    acts: tuple[str, ...]      # contracted, reduced or normalised axes
    links: tuple[Link, ...]


@dataclass(frozen=True)
class Column:
    box: Box
    rows: tuple[int | None, ...]   # left side, top to bottom: values passing by; None: the box
    stack: tuple[int, ...]         # the box's operands, top to bottom (as they were in the tuple)
    after: tuple[int, ...]         # right side: the tuple of values after the box
    ends: tuple[int, ...]          # values in `after` that nothing uses (their wires end here)


@dataclass(frozen=True)
class Output:
    name: str
    dtype: str
    value: int


@dataclass(frozen=True)
class Structure:
    name: str
    sizes: dict[str, int | None]
    values: dict[int, Value]
    inputs: tuple[int, ...]
    unused_inputs: tuple[int, ...]
    columns: tuple[Column, ...]
    outputs: tuple[Output, ...]
    # wire labels to show instead of `name=size` (a planned picture's `g_q`, `s_x`): for every
    # wire, and per value where a box labels its result (the level the value lives at)
    relabel: dict[str, str] = field(default_factory=dict)
    relabel_values: dict[int, dict[str, str]] = field(default_factory=dict)

    def label(self, axis: str, value: int | None = None) -> str:
        """A wire's label; `value`: the array it belongs to, labelled where a box makes it."""
        if axis in self.relabel_values.get(value, {}):
            return self.relabel_values[value][axis]
        if axis in self.relabel:
            return self.relabel[axis]
        return text.axis_label(axis, self.sizes.get(axis))


def foldable(g: DiGraph) -> set[int]:
    """Nodes whose value holds no array data: constants, sizes, indices and what combines them."""
    out: set[int] = set()
    for n in ir.order(g):
        o = ir.op(g, n)
        if isinstance(o, (ir.Const, ir.SizeOf, ir.Index)):
            out.add(n)
        elif not isinstance(o, (ir.Input, ir.Assign, ir.Output)) and all(
                u in out for u in ir.operands(g, n)):
            out.add(n)
    return out


class _Builder:
    def __init__(self, g: DiGraph):
        self.g = g
        self.folded = foldable(g)
        self.canon: dict[int, int] = {}
        self.values: dict[int, Value] = {}
        self.boxes: list[Box] = []
        self.outputs: list[Output] = []
        by_stmt = {g.nodes[e.node]["stmt"]: e.name for e in g.graph["equations"]}
        self.equation = {n: by_stmt.get(g.nodes[n]["stmt"]) for n in g}

    def run(self) -> None:
        g = self.g
        for n in ir.order(g):
            o = ir.op(g, n)
            if n in self.folded:
                continue
            if isinstance(o, ir.Input):
                self.values[n] = Value(n, ir.type_of(g, n).axes, o.name, o.dtype)
                self.canon[n] = n
            elif isinstance(o, ir.Output):
                (u,) = ir.operands(g, n)
                self.outputs.append(Output(o.name, o.dtype, self.operand(u)))
            elif isinstance(o, ir.Assign):
                self.assign(n, o)
            elif isinstance(o, ir.View) and o.labels == ir.type_of(g, ir.operands(g, n)[0]).axes:
                self.canon[n] = self.operand(ir.operands(g, n)[0])
            else:
                self.op_box(n, o)

    def operand(self, u: int) -> int:
        """The value of operand node `u`; a folded constant used as an array gets a source box."""
        if u not in self.canon:
            g = self.g
            self.values[u] = Value(u, ir.type_of(g, u).axes, None)
            label = text.formula(g, u, {})
            self.add(Box("source", u, label, label, (), u, (), ()))
        return self.canon[u]

    def add(self, box: Box) -> None:
        self.boxes.append(box)
        self.canon[box.node] = box.result

    def assign(self, n: int, o: ir.Assign) -> None:
        g = self.g
        (u,) = ir.operands(g, n)
        v = self.operand(u)
        axes = ir.type_of(g, n).axes
        if self.values[v].name is None:
            self.values[v] = replace(self.values[v], name=o.name, axes=axes)
            self.canon[n] = v
            return
        self.values[n] = Value(n, axes, o.name)
        links = tuple(_links(self.values[v], axes))
        self.add(Box("copy", n, "copy", f"{o.name}: copy of {self.values[v].name}", (v,), n, (),
                     links))

    def op_box(self, n: int, o) -> None:
        g = self.g
        nodes = ir.operands(g, n)
        self.values[n] = Value(n, ir.type_of(g, n).axes, None)
        if isinstance(o, ir.Map):
            arrays = [u for u in nodes if u not in self.folded]
        else:
            arrays = nodes
        operands = tuple(dict.fromkeys(self.operand(u) for u in arrays))
        result_axes = ir.type_of(g, n).axes
        if isinstance(o, ir.View):
            (u,) = nodes
            before = ir.type_of(g, u).axes
            links = tuple(Link(operands[0], a, b) for a, b in zip(before, o.labels))
            label = text.relabel_label(before, o.labels)
            kind, acts, what = "relabel", (), f"rename {label}"
        else:
            links = tuple(link for v in operands for link in _links(self.values[v], result_axes))
            kind, acts, label, what = _describe(g, n, o, self.folded)
        eq = self.equation[n]
        title = f"{eq}: {what}" if eq else what
        self.add(Box(kind, n, label, title, operands, n, acts, links))


def _links(value: Value, result_axes: tuple[str, ...]):
    for a in value.axes:
        yield Link(value.id, a, a if a in result_axes else None)


def _describe(g: DiGraph, n: int, o, folded: set[int]):
    """kind, acted-on axes, label, words."""
    if isinstance(o, ir.Contract):
        return "contract", o.axes, "", "contract " + " ".join(o.axes)
    if isinstance(o, ir.Reduce):
        return "reduce", o.axes, o.fn, f"{o.fn} over " + " ".join(o.axes)
    if isinstance(o, ir.Softmax):
        return "softmax", o.axes, "softmax", "softmax along " + " ".join(o.axes)
    if isinstance(o, ir.Gather):
        shown = " ".join(lab or "*" for lab in o.labels)
        return "map", (), "gather", f"gather [{shown}] (* : a computed position)"
    if isinstance(o, ir.Scan):     # keeps its axis, as a softmax does
        return "softmax", o.axes, o.fn, f"{o.fn} along " + " ".join(o.axes)
    label = text.map_label(g, n, folded)
    return "map", (), label, label if label == o.fn else f"{o.fn}: {label}"


def boxes(diagram) -> tuple[Box, ...]:
    """The boxes of a diagram's picture, in the default (topological) order."""
    b = _Builder(diagram.ir)
    b.run()
    return tuple(b.boxes)


def structure(diagram, key=None) -> Structure:
    """The columns, values and tuples of a diagram's picture.

    `key(box)` reorders the columns (stably); it must keep every box after the boxes that
    make its operands (the planned picture puts each kernel's boxes together).
    """
    g = diagram.ir
    b = _Builder(g)
    b.run()
    if key is not None:
        b.boxes = [bx for _, bx in sorted(enumerate(b.boxes), key=lambda ib: (key(ib[1]), ib[0]))]
    uses: dict[int, list[int]] = {}
    for k, box in enumerate(b.boxes):
        for v in box.operands:
            uses.setdefault(v, []).append(k)
    end = len(b.boxes)
    for out in b.outputs:
        uses.setdefault(out.value, []).append(end)

    def live_after(v: int, k: int) -> bool:
        return any(u > k for u in uses.get(v, ()))

    inputs = tuple(b.canon[n] for n in g.graph["inputs"].values())
    state = [v for v in inputs if live_after(v, -1)]
    columns = []
    for k, box in enumerate(b.boxes):
        rows = _arrange(state, box, lambda v: live_after(v, k))
        after = tuple(box.result if r is None else r for r in rows)
        ends = () if live_after(box.result, k) else (box.result,)
        stack = tuple(sorted(box.operands, key=state.index))
        columns.append(Column(box, rows, stack, after, ends))
        state = [v for v in after if live_after(v, k)]
    return Structure(diagram.name, {a: info.size for a, info in g.graph["axes"].items()},
                     b.values, inputs, tuple(v for v in inputs if v not in uses),
                     tuple(columns), tuple(b.outputs))


def _arrange(state: list[int], box: Box, still_live) -> tuple[int | None, ...]:
    """The left side of a box's column: the box sits where its topmost operand was.

    Operands that are used again later also pass by (the wire is copied); the
    other operands are gathered into the box from wherever they were.
    """
    rows: list[int | None] = []
    placed = False
    for v in state:
        if v in box.operands:
            if still_live(v):
                rows.append(v)
            if not placed:
                rows.append(None)
                placed = True
        else:
            rows.append(v)
    if not placed:
        rows.append(None)
    return tuple(rows)
