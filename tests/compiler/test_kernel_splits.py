"""Several kernels of one plan split on their own, each over its own axis
(compiler/kernel_split.py's `best`, greedily: the kernel that gains most, then again on the
plan it makes). Checked as meaning (two splits of one graph, the float64 reference against
the diagram's, counts that do not divide their axes and past them), and as the planner's
choice, what explain says and the plan interpreted at odd sizes against float64. QK-norm
attention's gradient (dgq over t, dgk over s) runs in tests/runtime/test_qk_norm_grad.py
(thorough)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import split as sp
from napkin.compiler.canonical import canonicalize
from napkin.compiler.diagram import Diagram
from napkin.compiler.plan import plan
from napkin.compiler.verify import verify
from napkin.runtime import reference
from napkin.runtime.bind import bind_sizes
from napkin.runtime.interpret import interpret

from .test_kernel_split import QK_NORM, _stmt

# two sums of few outputs, over two axes: at r=16384 q=8192 c=1024 each kernel runs 8 blocks
# or so (h100 model); each splits its own axis (r and q by 8), neither the other's
TWO = """axis r, q, c
in X[r c]: f32
in Y[q c]: f32
A[c] = sum[r](X * X)
B[c] = sum[q](exp(Y))
out A: f32, B: f32
"""


@pytest.mark.parametrize("counts", [(5, 3), (2, 40)])   # (t's, s's): not dividing; s's past s
def test_two_splits_of_one_graph_mean_what_the_gradient_means(counts):
    d = napkin.grad(napkin.load(QK_NORM))
    g = canonicalize(d.ir)
    inputs = random_inputs(d, {"t": 37, "s": 29, "h": 2}, 7)
    want = reference.evaluate(d, inputs)
    sizes = bind_sizes(d, {k: np.shape(v) for k, v in inputs.items()})
    g2 = sp.split(g, "t", counts[0], frozenset({_stmt(g, "dgq")}))
    g2 = sp.split(g2, "s", counts[1], frozenset({_stmt(g2, "dgk")}))
    verify(g2)
    first, second = sp.infos(g2)
    assert (first.axis, first.partials, second.axis, second.partials) == \
        ("t", ("dgq.part",), "s", ("dgk.part",))
    assert g2.graph["split"] == second and all(i.windows for i in (first, second))
    got = reference.evaluate(Diagram(g2, d.source), inputs, sizes=sp.complete_sizes(g2, sizes))
    for out in want:
        np.testing.assert_allclose(got[out], want[out], rtol=1e-9, atol=1e-9, err_msg=out)


def test_the_planner_splits_two_kernels_each_on_its_axis_and_it_interprets(within_budget):
    d = napkin.load(TWO)
    p = plan(d, "h100", {"r": 16384, "q": 8192, "c": 1024})
    assert p.split is not None and [(s.axis, s.alone.arrays) for s in p.split.each()] == \
        [("r", ("A",)), ("q", ("B",))], p.split
    assert all(s.alone.split < s.alone.unsplit for s in p.split.each())
    assert [i.axis for i in sp.infos(p.graph)] == ["r", "q"] and len(p.kernels) == 4
    from napkin.explain import render_text, report
    rep = report(p, compare=False)
    assert [s["axis"] for s in (rep["split"], *rep["split"]["also"])] == ["r", "q"]
    text = render_text(rep)
    assert "in A alone" in text and "in B alone" in text, text
    assert text.count("split: ") == 2 and "partial state  B.part" in text, text
    for shape in ({"r": 37, "q": 29, "c": 11}, {"r": 70, "q": 5, "c": 3}):    # q: past 8 parts
        inputs = random_inputs(d, shape, 11)
        within_budget(d, inputs, interpret(p, inputs))
