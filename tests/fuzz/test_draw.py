"""Pictures of random diagrams: `draw` and `draw_plan` give well-formed SVG for any diagram
the generator builds (every construct of the language, any plan the planner picks)."""

from __future__ import annotations

import xml.dom.minidom

from hypothesis import HealthCheck, given, settings

import napkin
from napkin.draw import draw, draw_plan
from napkin.compiler.plan import plan as make_plan
from napkin.diagrams.diagnostics import Source

from .budget import examples
from .gen import diagrams

@settings(max_examples=examples(20, 10), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(diagrams())
def test_random_diagrams_draw(case):
    d = napkin.load(Source("<fuzz>", case.text))
    for svg in (draw(d), draw_plan(make_plan(d, "h100", case.shape))):
        root = xml.dom.minidom.parseString(svg).documentElement
        assert root.tagName == "svg" and root.getElementsByTagName("text")
