"""Helpers the drawing tests share: decoding resvg's PNGs, and the ink boxes of a scene's texts."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from napkin.draw import text
from napkin.draw.scene import Scene, Text


def png_pixels(data: bytes) -> np.ndarray:
    """Decodes an 8-bit RGBA, non-interlaced PNG (what resvg writes) to an (h, w, 4) array."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour, _, _, interlace = header
    assert (depth, colour, interlace) == (8, 6, 0)
    raw = zlib.decompress(idat)
    stride = 4 * w
    out = np.zeros((h, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int32)
    for r in range(h):
        kind = raw[r * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, r * (stride + 1) + 1).astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prev) & 255
        elif kind == 1:   # each byte adds the one 4 to its left: a running sum per channel
            cur = (np.cumsum(line.reshape(w, 4), axis=0) & 255).reshape(stride)
        else:
            cur, b = line.tolist(), prev.tolist()
            for i in range(stride):
                a = cur[i - 4] if i >= 4 else 0
                if kind == 3:
                    cur[i] = (cur[i] + (a + b[i]) // 2) & 255
                else:
                    c = b[i - 4] if i >= 4 else 0
                    p = a + b[i] - c
                    pa, pb, pc = abs(p - a), abs(p - b[i]), abs(p - c)
                    cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b[i] if pb <= pc else c)) & 255
            cur = np.array(cur, dtype=np.int32)
        out[r] = cur
        prev = cur
    return out.reshape(h, w, 4)


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
