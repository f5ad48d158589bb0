"""Pictures of random diagrams: `draw` and `draw_plan` give well-formed SVG for any diagram
the generator builds (every construct of the language, any plan the planner picks)."""

from __future__ import annotations

import os
import xml.dom.minidom

from hypothesis import HealthCheck, given, settings

import napkin
from napkin.draw import draw, draw_plan
from napkin.compiler.plan import plan as make_plan
from napkin.diagrams.diagnostics import Source

from .gen import diagrams

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))


@settings(max_examples=max(1, int(20 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(diagrams())
def test_random_diagrams_draw(case):
    d = napkin.load(Source("<fuzz>", case.text))
    for svg in (draw(d), draw_plan(make_plan(d, "h100", case.shape))):
        root = xml.dom.minidom.parseString(svg).documentElement
        assert root.tagName == "svg" and root.getElementsByTagName("text")
