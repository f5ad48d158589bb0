"""Gradients of random well-typed diagrams (the fuzzers' generator) against central finite
differences of the float64 reference. A direction on which two step sizes disagree with each
other crosses a kink (relu, abs, max, a mask boundary) and is not a test of the rules."""

from __future__ import annotations


import numpy as np
from hypothesis import HealthCheck, assume, given, settings

import napkin
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.runtime.reference import evaluate

from .budget import examples
from .gen import diagrams, inputs_for

EXAMPLES = examples(40, 20)


def _directional(d, inputs, cot, name, v, eps):
    def loss(x):
        out = evaluate(d, {**inputs, name: x}, exact=True)
        return sum(float(np.sum(out[k] * cot[f"d{k}"])) for k in out if f"d{k}" in cot)
    return (loss(inputs[name] + eps * v) - loss(inputs[name] - eps * v)) / (2 * eps)


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(diagrams())
def test_random_diagram_gradients_match_finite_differences(case):
    d = napkin.load(Source("<fuzz>", case.text))
    rng = np.random.default_rng(case.seed)
    axes = d.ir.graph["axes"]
    by_rep = {axes[a].rep: s for a, s in case.shape.items() if a in axes}
    size = {a: info.size if info.size is not None else case.shape.get(a, by_rep.get(info.rep))
            for a, info in axes.items()}
    discrete = inputs_for(d, case.shape, case.seed)     # integers and booleans as drawn
    inputs = {s.name: discrete[s.name] if s.dtype in ("i32", "i64", "bool") else
              rng.uniform(0.2, 1.0, [size[a] for a in s.axes]) * rng.choice([-1, 1])
              for s in d.inputs}
    out = evaluate(d, inputs, exact=True)
    assume(all(np.isfinite(o).all() for o in out.values()))
    cot = {f"d{s.name}": rng.standard_normal([size[a] for a in s.axes]) for s in d.outputs
           if s.dtype not in ("i32", "i64")}       # an integer output passes no gradient back
    checked = 0
    for s in d.inputs:
        if s.dtype in ("i32", "i64", "bool"):    # no gradient: not differentiable
            continue
        try:
            grad = napkin.grad(d, wrt=[s.name])
        except NapkinError as exc:      # no output depends on it (or through a gather)
            assert exc.diagnostics[0].code == "N0810", exc
            continue
        names = [c.name for c in grad.inputs[len(d.inputs):]]
        (g,) = evaluate(grad, {**inputs, **dict(zip(names, cot.values()))}, exact=True).values()
        v = rng.standard_normal(inputs[s.name].shape)
        coarse = _directional(d, inputs, cot, s.name, v, 1e-5)
        fine = _directional(d, inputs, cot, s.name, v, 1e-6)
        scale = max(1.0, abs(fine))
        if abs(coarse - fine) > 1e-4 * scale:       # a kink between the two steps
            continue
        exact = float(np.sum(g * v))
        assert abs(fine - exact) <= 1e-5 * scale, (s.name, fine, exact, grad.source.text)
        checked += 1
    assume(checked)
