"""Random schedule hints on the library diagrams (a Hypothesis strategy) and their check:
one or two `group`/`stream` hints on any axis, by 1, odd sizes, the whole axis or past it,
at any level or none. A case must end in a clean NapkinError pointing at a hint's line
(N0601 two hints for one axis and level, N0602 no such level, N0603 does not fit, N0604
applies to no kernel) or in a plan whose results match the float64 reference; anything else
raises Checked (a `load` failure for a bad error, else compile/run/compare)."""

from __future__ import annotations

from hypothesis import strategies as st

import napkin
from napkin.compiler.plan import plan as make_plan
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.sources import library_names, library_source
from napkin.runtime import reference

from .gen import inputs_for
from .harness import Checked, Failure, run_backends

HINT_CODES = {"N0601", "N0602", "N0603", "N0604"}
SIZES = {"b": 2, "h": 2, "q": 37, "x": 45, "m": 33, "n": 31, "k": 40, "r": 9, "c": 70, "t": 13,
         "i": 24, "o": 17, "g": 2, "d": 64, "f": 29, "v": 19, "e": 16}


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


def check_hinted(case, emulate: bool) -> None:
    name, text, hints = case
    first_hint_line = text.count("\n") - len(hints) + 1
    try:
        # paged_attention fixes its keys (no input has them): as many as the others have
        few = {"x": SIZES["x"]} if napkin.load(name).axes.get("x") else {}
        d = napkin.load(Source("hinted.napkin", text), **few)
        reps = d.ir.graph["axes"]     # axes the diagram makes equal (varlen's q, x): one size
        shape = {a: SIZES[reps[a].rep] for a, size in d.axes.items() if size is None}
        p = make_plan(d, "h100", shape)
    except NapkinError as exc:
        for diag in exc.diagnostics:
            if diag.code not in HINT_CODES or diag.span is None \
                    or diag.span.line < first_hint_line:
                raise Checked(Failure("load", "plan", f"{name}: {exc}")) from None
        return
    sizes = {a: (size or shape[a]) for a, size in d.axes.items()}
    inputs = inputs_for(d, sizes, 0)
    ref = reference.evaluate(d, inputs)
    low = reference.evaluate(d, inputs, precision="lowp")
    run_backends(d, p, inputs, sizes, ref, low, emulate=emulate)
