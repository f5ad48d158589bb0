"""Geometry without looks: the shapes a picture is made of, each tagged with what it shows.

The layout places these; a `Style` decides how each looks (colour, stroke,
font) from its `role` and its tags (`value`, `axis`), so a later pass can
colour arrays by memory level or relabel wires without touching the layout.
`layer` orders painting: fills under wires under marks under text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Layers, painted in this order.
FILL, WIRE, MARK, TEXT = 0, 1, 2, 3


@dataclass(frozen=True)
class Shape:
    role: str                      # what it is: "wire", "box", "axis-label", ... (see style.py)
    value: int | None = field(default=None, kw_only=True)   # the array it belongs to
    axis: str | None = field(default=None, kw_only=True)    # the wire it belongs to
    title: str | None = field(default=None, kw_only=True)   # tooltip text
    layer: int = field(default=WIRE, kw_only=True)
    # the planned picture: the memory level the shape is coloured by (index into the target's
    # levels), and `data-*` attributes written on its element (array, kernel, level, ...)
    level: int | None = field(default=None, kw_only=True)
    data: tuple[tuple[str, str], ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class Curve(Shape):
    """A wire from (x1, y1) to (x2, y2): straight when level, else an S-curve level at both ends."""

    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Rect(Shape):
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class Dot(Shape):
    x: float
    y: float
    r: float


@dataclass(frozen=True)
class Polygon(Shape):
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Text(Shape):
    x: float
    y: float                       # baseline
    text: str
    anchor: str = "start"          # start | middle | end
    size: float = 11.0


@dataclass(frozen=True)
class Frame:
    """Where one column of the picture lies: from the start of its transition to the end of its
    stub, and the arrays (value, top y) on its left before the wires bend and on its right."""

    x0: float
    x1: float
    before: tuple[tuple[int, float], ...]
    after: tuple[tuple[int, float], ...]


@dataclass
class Scene:
    width: float
    height: float
    title: str
    shapes: list[Shape] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)    # one per column, left to right

    def add(self, shape: Shape) -> None:
        self.shapes.append(shape)

    def painted(self) -> list[Shape]:
        """Shapes in painting order (stable within a layer)."""
        return sorted(self.shapes, key=lambda s: s.layer)
