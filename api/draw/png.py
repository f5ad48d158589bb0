"""`napkin draw -o picture.png`: the SVG rasterised by resvg (the `plot` extra's resvg-py,
self-contained wheels, no system libraries); BackendUnavailable (N0901) without it."""

from __future__ import annotations

from .extra import need

ZOOM = 2     # pixels per SVG unit: crisp on high-density screens


def _resvg():
    import resvg_py
    return resvg_py


def require():
    return need(_resvg, "resvg-py", "a .png picture", ", or write .svg")


def svg_to_png(svg: str) -> bytes:
    return bytes(require().svg_to_bytes(svg_string=svg, zoom=ZOOM))
