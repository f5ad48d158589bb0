"""Schedule hints, any of them: `group`/`stream` of any axis of a library diagram, by any
size (1, odd, the whole axis, past it), at any level or none, alone or two at once. Each
ends in a clean NapkinError pointing at a hint's line (N0601 two hints for one axis and level, N0602 no such level, N0603 does not
fit, N0604 applies to no kernel) or in a plan that honours the hint and whose interpreted
result matches the float64 reference (the emulator runs a share of them too)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import napkin
from napkin.compiler.plan import plan as make_plan
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.sources import library_names, library_source
from napkin.runtime import reference

from .gen import inputs_for
from .harness import Checked, run_backends

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))
HINT_CODES = {"N0601", "N0602", "N0603", "N0604"}
SIZES = {"b": 2, "h": 2, "q": 37, "x": 45, "m": 33, "n": 31, "k": 40, "r": 9, "c": 70, "t": 13,
         "i": 24, "o": 17, "g": 2, "d": 64, "f": 29}


@st.composite
def hinted(draw):
    name = draw(st.sampled_from(library_names()))
    text = library_source(name).text
    axes = list(napkin.load(text).axes)
    hints = []
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["group", "stream"]))
        axis = draw(st.sampled_from(axes))
        size = draw(st.sampled_from([1, 2, 3, 7, 16, 64, 1000]))
        level = draw(st.sampled_from([None, "smem", "registers", "global"]))
        hints.append(f"{kind} {axis} by {size}" + (f" at {level}" if level else ""))
    return name, text.rstrip("\n") + "\n" + "\n".join(hints) + "\n", hints


def _check(case, emulate: bool) -> None:
    name, text, hints = case
    first_hint_line = text.count("\n") - len(hints) + 1
    try:
        d = napkin.load(Source("hinted.napkin", text))
        shape = {a: SIZES[a] for a, size in d.axes.items() if size is None}
        p = make_plan(d, "h100", shape)
    except NapkinError as exc:
        for diag in exc.diagnostics:
            assert diag.code in HINT_CODES, f"{name}: {exc}"
            assert diag.span is not None and diag.span.line >= first_hint_line, f"{name}: {exc}"
        return
    sizes = {a: (size or shape[a]) for a, size in d.axes.items()}
    inputs = inputs_for(d, sizes, 0)
    ref = reference.evaluate(d, inputs)
    low = reference.evaluate(d, inputs, precision="lowp")
    try:
        run_backends(d, p, inputs, sizes, ref, low, emulate=emulate)
    except Checked as exc:
        raise AssertionError(f"{exc.failure}\n{text}") from None


@settings(max_examples=max(1, int(150 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(hinted())
def test_hints_interpreted(case):
    _check(case, emulate=False)


@settings(max_examples=max(1, int(10 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(hinted())
def test_hints_emulated(case):
    _check(case, emulate=True)
