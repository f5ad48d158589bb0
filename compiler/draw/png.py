"""`napkin draw -o picture.png`: the SVG rasterised by resvg (the `plot` extra's resvg-py,
self-contained wheels, no system libraries); BackendUnavailable (N0901) without it."""

from __future__ import annotations

from ...diagrams.diagnostics import BackendUnavailable, Diagnostic

INSTALL = "pip install 'napkin[plot]'"


def require():
    try:
        import resvg_py
    except ImportError as exc:
        raise BackendUnavailable(Diagnostic(
            "N0901", f"resvg-py is not installed, and a .png picture needs it ({exc})",
            help=f"install the plot extra: {INSTALL}, or write .svg")) from None
    return resvg_py


ZOOM = 2     # pixels per SVG unit: crisp on high-density screens


def svg_to_png(svg: str) -> bytes:
    return bytes(require().svg_to_bytes(svg_string=svg, zoom=ZOOM))
