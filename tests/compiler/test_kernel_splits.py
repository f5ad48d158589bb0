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


def test_every_split_of_kernels_alone_merges_in_its_last_blocks():
    """TWO at r=16384 q=8192 c=1024 (h100 model): each split's merge runs in its partial
    kernel's last blocks (41.7 -> 40.8 us; before, only the first split's did), each tail its
    own counters; interpreted at odd sizes against float64 by the test above's plan."""
    p = plan(napkin.load(TWO), "h100", {"r": 16384, "q": 8192, "c": 1024})
    assert sorted(t.axis for t in p.tails) == ["q", "r"]
    assert all(t.saved > 0 for t in p.tails)
    names = {p.kernels[t.partial].kernel.name for t in p.tails}
    assert len(names) == 2


def test_later_rounds_price_the_counts_around_the_first_rounds_best():
    from napkin.compiler.kernel_split import _walk
    gains = {2: 1.0, 4: 3.0, 8: 5.0, 16: 6.0, 32: 2.0, 64: 1.0}
    priced: dict = {}
    for parts in _walk(list(gains), 4, priced):
        priced[parts] = gains[parts]
    assert 16 in priced and 32 in priced and 64 not in priced    # climbed 4 -> 8 -> 16
    priced = {}
    for parts in _walk(list(gains), None, priced):
        priced[parts] = gains[parts]
    assert set(priced) == set(gains)                             # the first round: every one


@pytest.mark.parametrize("split", [{"dg:r": 16}, {"dg:r": 5}, {"dg:r": 60}])
def test_a_hinted_split_of_one_kernel_interprets(split, within_budget):
    """`--split dg:r=N`: rmsnorm's gradient splits r in the kernel computing dg alone, the
    count as given (past the axis: one position per split), run at odd sizes."""
    d = napkin.grad(napkin.load("rmsnorm"))
    p = plan(d, "h100", {"r": 4096, "c": 64}, {"split": split})
    s = p.split
    assert s.forced and s.alone is not None and s.alone.arrays == ("dg",) and s.axis == "r"
    assert s.parts == min(split["dg:r"], 4096) and s.more == ()
    inputs = random_inputs(d, {"r": 37, "c": 11}, 5)
    within_budget(d, inputs, interpret(p, inputs))


@pytest.mark.parametrize("split, code, words", [
    ({"dgg:r": 4}, "N0201", "did you mean `dg`"),
    ({"X:r": 4}, "N0607", "is an input"),
    ({"dg:c": 4}, "N0607", "--split dg:r=4"),
    ({"dg:z": 4}, "N0201", "no axis `z`"),
    ({"dg:r": 4, "dX:r": 2}, "N0607", "one split per axis"),
    ({"r": 4, "dg:r": 2}, "N0607", "beside splits of kernels alone")])
def test_hinted_kernel_splits_that_cannot_be_say_why(split, code, words):
    d = napkin.grad(napkin.load("rmsnorm"))
    with pytest.raises(napkin.NapkinError) as exc:
        plan(d, "h100", {"r": 4096, "c": 64}, {"split": split})
    assert exc.value.diagnostics[0].code == code and words in str(exc.value), str(exc.value)


def test_a_product_of_probabilities_another_kernel_stores_splits_as_a_plain_product(
        within_budget):
    """Softcapped attention unfused, `--split O:x=3`: P = softmax[x](S) is its own kernel's,
    so O = P * V splits as a plain contraction (P gathered as an input), not as the
    softmax-product pair (whose partial logsumexp read P's scores unsplit: the fuzzer's
    draw); with S's kernel split over d too, interpreted at odd sizes."""
    d = napkin.load("softcap_attention", d=9)
    for split in ({"O:x": 3}, {"S:d": 2, "O:x": 3}):
        p = plan(d, "h100", {"b": 2, "h": 3, "q": 17, "x": 17}, {"split": split},
                 fusion=False)
        assert [s.axis for s in p.split.each()] == [k.split(":")[1] for k in split]
        inputs = random_inputs(d, {"b": 2, "h": 3, "q": 5, "x": 17}, 3)
        within_budget(d, inputs, interpret(p, inputs))
