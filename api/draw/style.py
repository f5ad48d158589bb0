"""How a picture looks: colours, strokes and fonts, chosen per shape from its role and tags.

The layout never names a colour. The default style draws in ink on paper, like
the paper's black-and-white diagrams; a later style (the planned picture)
colours each array by the memory level it lives in through `array_colour`,
which sees the shape's `value` and `axis` tags.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scene import Shape

ROLES = ("wire", "separator", "box", "box-label", "axis-label", "array-label", "caption",
         "join", "branch", "cap", "softmax")


@dataclass(frozen=True)
class Style:
    font: str = "DejaVu Sans Mono, Menlo, Consolas, monospace"
    ink: str = "#1b1b1b"
    muted: str = "#5a5a5a"
    paper: str = "#ffffff"
    box_fill: str = "#f3efe2"
    wire_width: float = 1.5
    halo: float = 3.0          # white outline behind text, so wires never hide a label

    def array_colour(self, shape: Shape) -> str:
        """Colour of an array's wires and labels; the hook a planned style overrides."""
        return self.ink

    def paint(self, shape: Shape) -> dict[str, str]:
        """SVG presentation attributes for `shape`."""
        role = shape.role
        if role == "wire":
            return {"stroke": self.array_colour(shape), "stroke-width": _n(self.wire_width),
                    "fill": "none"}
        if role == "separator":
            return {"stroke": self.muted, "stroke-width": "1", "stroke-dasharray": "4 3",
                    "fill": "none"}
        if role == "box":
            return {"stroke": self.ink, "stroke-width": "1.2", "fill": self.box_fill,
                    "fill-opacity": "0.85"}
        if role == "softmax":
            return {"stroke": self.ink, "stroke-width": "1.3", "fill": self.paper,
                    "stroke-linejoin": "round"}
        if role in ("join", "branch", "cap"):
            return {"fill": self.array_colour(shape) if role != "join" else self.ink}
        if role in ("axis-label", "array-label", "box-label", "caption"):
            attrs = {"fill": self.muted if role == "axis-label" else self.ink}
            if role in ("array-label", "caption"):
                attrs["font-weight"] = "bold"
            if role != "caption":
                attrs.update({"stroke": self.paper, "stroke-width": _n(self.halo),
                              "stroke-linejoin": "round", "paint-order": "stroke"})
            return attrs
        raise ValueError(f"no style for role {role!r}")


def _n(x: float) -> str:
    return format(x, "g")


# The paper colours level 0 (global memory) black and level 1 orange; deeper levels get
# other colours, in this order.
LEVEL_COLOURS = ("#1b1b1b", "#e07b00", "#1f6fb4", "#2e9a4f", "#8e44ad", "#b03a48")

PLANNED_ROLES = ("kernel", "kernel-label", "load", "store", "swatch", "legend", "table-head",
                 "table-kernel", "table-cell", "table-total", "table-note")


@dataclass(frozen=True)
class PlannedStyle(Style):
    """The planned picture: every array in the colour of the memory level it lives at."""

    region_fill: str = "#f5f5f2"
    region_stroke: str = "#b5b5ad"

    def level_colour(self, level: int | None) -> str:
        if level is None:
            return self.muted
        return LEVEL_COLOURS[level % len(LEVEL_COLOURS)]

    def array_colour(self, shape: Shape) -> str:
        return self.level_colour(shape.level)

    def paint(self, shape: Shape) -> dict[str, str]:
        role = shape.role
        if role in ("array-label", "axis-label") and shape.level is not None:
            attrs = super().paint(shape)
            attrs["fill"] = self.level_colour(shape.level)
            return attrs
        if role == "kernel":
            return {"fill": self.region_fill, "stroke": self.region_stroke, "stroke-width": "1",
                    "stroke-dasharray": "5 3"}
        if role in ("load", "store"):
            return {"fill": self.level_colour(shape.level), "stroke": self.paper,
                    "stroke-width": "1"}
        if role == "swatch":
            return {"stroke": self.level_colour(shape.level), "stroke-width": "3", "fill": "none"}
        if role in ("kernel-label", "legend", "table-head", "table-kernel", "table-cell",
                    "table-total", "table-note"):
            attrs = {"fill": self.muted if role == "table-note" else self.ink}
            if role in ("kernel-label", "table-head", "table-kernel", "table-total"):
                attrs["font-weight"] = "bold"
            return attrs
        return super().paint(shape)
