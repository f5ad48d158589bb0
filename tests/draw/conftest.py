"""Helpers the drawing tests share: decoding resvg's PNGs, and the ink boxes of a scene's texts."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from napkin.draw import text
from napkin.draw.scene import Scene, Text


def png_pixels(data: bytes) -> np.ndarray:
    """Decodes an 8-bit RGBA, non-interlaced PNG (what resvg writes) to an (h, w, 4) array:
    the header checked here, the pixels Pillow's (a decoder of its own, not resvg's; a
    hand-written one, per byte in Python, took 4.9 of test_draw's CPU-s)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    assert (depth, colour, interlace) == (8, 6, 0)
    from PIL import Image
    with Image.open(io.BytesIO(data)) as image:
        assert image.mode == "RGBA" and image.size == (w, h)
        return np.asarray(image).copy()


def ink_boxes(scene: Scene):
    """Approximate ink boxes of the texts: monospace advance, ascent 0.8em, descent 0.25em."""
    out = []
    for s in scene.shapes:
        if isinstance(s, Text) and s.text:
            w = text.width(s.text, s.size)
            x = {"start": s.x, "middle": s.x - w / 2, "end": s.x - w}[s.anchor]
            out.append((x, s.y - 0.8 * s.size, x + w, s.y + 0.25 * s.size, s.text))
    return out


def assert_readable(scene: Scene) -> None:
    """No two texts overlap, every text and wire is inside the picture."""
    from napkin.draw.scene import Curve
    rects = ink_boxes(scene)
    for i, (x0, y0, x1, y1, t) in enumerate(rects):
        assert 0 <= x0 and x1 <= scene.width and 0 <= y0 and y1 <= scene.height, t
        for (u0, v0, u1, v1, s) in rects[i + 1:]:
            assert x1 <= u0 or u1 <= x0 or y1 <= v0 or v1 <= y0, f"{t!r} overlaps {s!r}"
    wires = [s for s in scene.shapes if isinstance(s, Curve) and s.role == "wire"]
    assert all(0 <= min(w.x1, w.x2) and max(w.x1, w.x2) <= scene.width for w in wires)


@pytest.fixture
def decode_png():
    return png_pixels


@pytest.fixture
def readable():
    return assert_readable
