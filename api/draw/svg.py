"""Writes a `Scene` as SVG text: well-formed, deterministic, every name escaped."""

from __future__ import annotations

from .scene import Curve, Dot, Polygon, Rect, Scene, Shape, Text
from .style import Style

# escape and quoteattr as xml.sax.saxutils writes them (tested equal there): that module
# imports urllib, http.client and ssl, tens of milliseconds for three replacements
_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_ATTR = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\n": "&#10;", "\r": "&#13;",
                       "\t": "&#9;"})


def escape(data: str) -> str:
    return data.translate(_TEXT)


def quoteattr(data: str) -> str:
    data = data.translate(_ATTR)
    if '"' not in data:
        return f'"{data}"'
    if "'" not in data:
        return f"'{data}'"
    return '"' + data.replace('"', "&quot;") + '"'


def num(x: float) -> str:
    """Two decimals at most, no trailing zeros, never `-0`: the same bytes on every machine."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _attrs(pairs: dict[str, str]) -> str:
    return "".join(f" {k}={quoteattr(v)}" for k, v in pairs.items())


def _element(tag: str, geometry: dict[str, str], shape: Shape, body: str = "") -> str:
    attrs = {"class": shape.role, **geometry, **{f"data-{k}": v for k, v in shape.data}}
    if shape.title:
        body = f"<title>{escape(shape.title)}</title>" + body
    if not body:
        return f"<{tag}{_attrs(attrs)}/>"
    return f"<{tag}{_attrs(attrs)}>{body}</{tag}>"


def shape_svg(shape: Shape) -> str:
    """The element for `shape`, with its geometry only (its paint comes from the enclosing group)."""
    if isinstance(shape, Curve):
        if shape.y1 == shape.y2:
            geo = {"x1": num(shape.x1), "y1": num(shape.y1), "x2": num(shape.x2), "y2": num(shape.y2)}
            return _element("line", geo, shape)
        xm = (shape.x1 + shape.x2) / 2
        d = (f"M{num(shape.x1)} {num(shape.y1)}C{num(xm)} {num(shape.y1)} {num(xm)} {num(shape.y2)} "
             f"{num(shape.x2)} {num(shape.y2)}")
        return _element("path", {"d": d}, shape)
    if isinstance(shape, Rect):
        geo = {"x": num(shape.x), "y": num(shape.y), "width": num(shape.w), "height": num(shape.h),
               "rx": "3"}
        return _element("rect", geo, shape)
    if isinstance(shape, Dot):
        return _element("circle", {"cx": num(shape.x), "cy": num(shape.y), "r": num(shape.r)},
                        shape)
    if isinstance(shape, Polygon):
        pts = " ".join(f"{num(x)},{num(y)}" for x, y in shape.points)
        return _element("polygon", {"points": pts}, shape)
    if isinstance(shape, Text):
        geo = {"x": num(shape.x), "y": num(shape.y), "font-size": num(shape.size)}
        if shape.anchor != "start":
            geo["text-anchor"] = shape.anchor
        return _element("text", geo, shape, escape(shape.text))
    raise TypeError(f"cannot write {shape!r}")


def to_svg(scene: Scene, style: Style | None = None, description: str = "") -> str:
    style = style or Style()
    w, h = num(scene.width), num(scene.height)
    head = {"xmlns": "http://www.w3.org/2000/svg", "width": w, "height": h,
            "viewBox": f"0 0 {w} {h}", "font-family": style.font}
    lines = [f"<svg{_attrs(head)}>",
             f"<title>{escape(scene.title)}</title>"]
    if description:
        lines.append(f"<desc>{escape(description)}</desc>")
    lines.append(f"<rect{_attrs({'class': 'paper', 'width': w, 'height': h, 'fill': style.paper})}/>")
    # shapes painted alike share a group that carries the paint (all of it inherits)
    run: list[str] = []
    paint: dict[str, str] | None = None
    for shape in scene.painted():
        p = style.paint(shape)
        if p != paint and run:
            lines.append(f"<g{_attrs(paint)}>\n" + "\n".join(run) + "\n</g>")
            run = []
        paint = p
        run.append(shape_svg(shape))
    if run:
        lines.append(f"<g{_attrs(paint)}>\n" + "\n".join(run) + "\n</g>")
    lines.append("</svg>")
    return "\n".join(lines) + "\n"
