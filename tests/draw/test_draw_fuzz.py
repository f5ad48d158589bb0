"""Any diagram that checks draws: well-formed, deterministic, every array named, no label overlaps."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import napkin
from napkin.draw import Metrics, draw, layout, structure, text
from napkin.draw.scene import Text
from napkin.diagrams.diagnostics import NapkinError

HEADER = "axis a, b, c, d = 4\nin X[a b]: f16\nin W[b c]: f16\nin v[b]: f32\n"
POOL = [
    "Y1[a c] = X * W", "Y2[a] = sum[b](X)", "Y3[a b] = softmax[b](X)",
    "Y4[a b] = where(a <= b, X, -inf)", "Y5[b a] = X[b a]", "Y6[a b] = X - Y2",
    "Y7[a c] = gelu(Y1 + 1)", "Y8[a] = max[b](Y3)", "Y9[] = sum[a b](X)",
    "Y10[a b c] = X * W", "Y11[a b] = X / Y9", "Y12[c] = v * W", "Y13[a d] = X[a d]",
    "Y14[a b] = exp(X * X)", "Y15[a] = X[a a]", "Y16[a c] = Y1 * Y7[a c] + Y2",
    "Y17[a b] = v", "Y18[b] = logsumexp[a](Y6)",
]
NAMES = [line.split("[")[0] for line in POOL] + ["X", "W", "v"]


@st.composite
def diagrams(draw_):
    lines = draw_(st.lists(st.sampled_from(POOL), min_size=1, max_size=8, unique=True))
    lines.sort(key=POOL.index)
    defined = [line.split("[")[0] for line in lines]
    outs = draw_(st.lists(st.sampled_from(defined + ["X"]), min_size=1, max_size=4, unique=True))
    return HEADER + "\n".join(lines) + "\n" + "".join(f"out {o}: f32\n" for o in outs)


# 75 diagrams in the default run, 150 with NAPKIN_FUZZ_SCALE >= 2 (tests/fuzz/test_draw.py
# draws the generator's random diagrams, and test_draw.py every library diagram, too)
EXAMPLES = 150 if float(os.environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2 else 75


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(diagrams())
def test_every_checked_diagram_draws(source):
    try:
        d = napkin.load(source)
    except NapkinError:
        assume(False)
    svg = draw(d)
    assert draw(napkin.load(source)) == svg
    root = ET.fromstring(svg)
    shown = {e.text.split(" : ")[0] for e in root.iter("{http://www.w3.org/2000/svg}text")
             if e.get("class") == "array-label"}
    assert {s.name for s in d.inputs + d.outputs} | {e.name for e in d.equations} <= shown
    scene = layout(structure(d), Metrics())
    boxes = []
    for s in scene.shapes:
        if isinstance(s, Text) and s.text:
            w = text.width(s.text, s.size)
            x = {"start": s.x, "middle": s.x - w / 2, "end": s.x - w}[s.anchor]
            boxes.append((x, s.y - 0.8 * s.size, x + w, s.y + 0.25 * s.size, s.text))
    for i, (x0, y0, x1, y1, t) in enumerate(boxes):
        assert 0 <= x0 and x1 <= scene.width and 0 <= y0 and y1 <= scene.height, t
        for u0, v0, u1, v1, s in boxes[i + 1:]:
            assert x1 <= u0 or u1 <= x0 or y1 <= v0 or v1 <= y0, f"{t!r} overlaps {s!r}"
