"""A split of one kernel of a plan (compiler/kernel_split.py): a gain's or a bias's gradient
(`dg[c] = sum[r](...)`, few outputs for a long reduction) splits its reduced axis in its own
statements alone; the other kernels keep their statements, and the arrays they store enter
the split as inputs do. Checked as meaning (the float64 reference of the split graph against
the diagram's: counts that do not divide the axis, counts past it), as the planner's choice
and what explain says, and as plans planned at scale and run at odd sizes (interpreter,
emulator) against the float64 oracle under the tolerance rule."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler import split as sp
from napkin.compiler.canonical import canonicalize
from napkin.compiler.diagram import Diagram
from napkin.compiler.plan import plan
from napkin.compiler.verify import verify
from napkin.runtime import reference
from napkin.runtime.bind import bind_sizes
from napkin.runtime.interpret import interpret

from ..runtime.test_qk_norm_grad import QK_NORM   # (the diagram of its own tests)

LINEAR = """axis t, i, o
in X[t i]: f16
in W[i o]: f16
in bias[o]: f16
Y[t o] = X * W + bias
out Y: f16
"""


def _stmt(g, name: str) -> int:
    return next(e.stmt for e in g.graph["equations"] if e.name == name)


def _split_statements(g, info) -> set:
    """The statements holding a node over the split's axes."""
    return {d["stmt"] for n, d in g.nodes(data=True)
            if {info.part_axis, info.share_axis} & set(ir.type_of(g, n).axes)}


@pytest.mark.parametrize("source, axis, names, shape", [
    ("rmsnorm", "r", ("dg",), {"r": 37, "c": 11}),
    ("layernorm", "r", ("dgamma", "dbeta"), {"r": 37, "c": 11}),
    (QK_NORM, "t", ("dgq",), {"t": 37, "s": 29, "h": 2})])
def test_a_split_within_some_statements_means_what_the_gradient_means(source, axis, names,
                                                                        shape, rng):
    d = napkin.grad(napkin.load(source))
    g = canonicalize(d.ir)
    inputs = random_inputs(d, shape, 5)
    want = reference.evaluate(d, inputs)
    sizes = bind_sizes(d, {k: np.shape(v) for k, v in inputs.items()})
    within = frozenset(_stmt(g, n) for n in names)
    assert sp.splittable(g, axis, within) is None
    for parts in (2, 5, sizes[axis] + 3):          # not dividing the axis; past it
        g2 = sp.split(g, axis, parts, within)
        verify(g2)
        info = g2.graph["split"]
        assert info.within == within and {m for _, m in info.apart} == within
        # the split reaches the named statements' partial and merge sides alone (and copies
        # of what they recomputed for themselves, `D.split`): no other statement is rewritten
        touched = _split_statements(g2, info) - within - {p for p, _ in info.apart}
        assert all(e.name.endswith(".split") for e in g2.graph["equations"]
                   if e.stmt in touched), touched
        got = reference.evaluate(Diagram(g2, d.source), inputs,
                                 sizes=sp.complete_sizes(g2, sizes))
        for out in want:
            np.testing.assert_allclose(got[out], want[out], rtol=1e-9, atol=1e-9,
                                       err_msg=f"{names} split {axis} by {parts}")


def test_the_whole_diagram_split_rewrites_attention_the_kernel_split_does_not():
    """QK-norm's gradient: `t` split across the diagram rewrites dKn and dV's products over
    the queries too; within dgq's statement it rewrites dgq alone, reading dQn as an input."""
    g = canonicalize(napkin.grad(napkin.load(QK_NORM)).ir)
    whole = sp.split(g, "t", 4).graph["split"]
    assert len(whole.apart) > 1 and whole.within is None
    one = sp.split(g, "t", 4, frozenset({_stmt(g, "dgq")}))
    info = one.graph["split"]
    assert len(info.apart) == 1 and info.partials == ("dgq.part",)
    dqn = one.graph["arrays"]["dQn"]
    assert any(isinstance(ir.op(one, v), ir.Gather) and info.share_axis in
               ir.type_of(one, v).axes for v in one.successors(dqn))


def test_statements_without_a_reduction_over_the_axis_do_not_split():
    g = canonicalize(napkin.grad(napkin.load("rmsnorm")).ir)
    assert "no reduction over `r`" in sp.splittable(g, "r", frozenset({_stmt(g, "dX")}))


def test_the_planner_splits_a_gain_gradient_alone_and_it_runs_on_the_emulator(rng,
                                                                               within_budget):
    """rmsnorm's gradient at r=16384, c=1024 (h100 model): dg's kernel (1024 outputs over
    16384 rows) splits in its own statements: 79.6 -> 66.2 us, where the split of the whole
    diagram also recomputed `t3` in a kernel of its own. Planned at scale, run at r=70 (not a
    multiple of the split's share, empty splits past it) and c=33 on the emulator."""
    from napkin.pipeline import run_plan
    d = napkin.grad(napkin.load("rmsnorm"))
    p = plan(d, "h100", {"r": 16384, "c": 1024})
    s = p.split
    assert s is not None and not s.forced and s.axis == "r" and s.alone is not None
    assert s.alone.arrays == ("dg",) and s.alone.split < s.alone.unsplit
    assert p.graph.graph["split"].within is not None
    assert len(p.kernels) == 3 and not any(e.name.endswith(".split") for e in p.graph.graph["equations"])
    assert p.time < 70e-6                           # 79.6 us split across the diagram
    from napkin.explain import render_text, report
    text = render_text(report(p, compare=False))
    assert "in dg alone, the reductions of kernel" in text and "(final plans)" in text
    inputs = random_inputs(d, {"r": 70, "c": 33}, 3)
    within_budget(d, inputs, run_plan(p, inputs, {"r": 70, "c": 33}))


def test_a_bias_gradient_beside_its_products_splits_alone_and_interprets(within_budget):
    """A linear layer's gradient at t=16384, i=o=4096 (h100 model): dbias alone splits (its
    kernel 62.3 -> 47.1 us), the products dX and dW keep their plans; interpreted at t=37."""
    d = napkin.grad(napkin.load(LINEAR))
    p = plan(d, "h100", {"t": 16384, "i": 4096, "o": 4096})
    assert p.split is not None and p.split.alone is not None
    assert p.split.alone.arrays == ("dbias",) and p.split.partials == ("dbias.part",)
    inputs = random_inputs(d, {"t": 37, "i": 5, "o": 7}, 9)
    within_budget(d, inputs, interpret(p, inputs))


@pytest.mark.thorough
@pytest.mark.parametrize("source, big, small", [
    ("layernorm", {"r": 16384, "c": 1024}, {"r": 97, "c": 19}),
    (LINEAR, {"t": 16384, "i": 4096, "o": 4096}, {"t": 37, "i": 20, "o": 33})])
def test_kernel_splits_run_on_the_emulator(source, big, small, within_budget):
    from napkin.pipeline import run_plan
    d = napkin.grad(napkin.load(source))
    p = plan(d, "h100", big)
    assert p.split is not None and p.split.alone is not None
    inputs = random_inputs(d, small, 21)
    within_budget(d, inputs, run_plan(p, inputs, small))


@pytest.mark.thorough
def test_a_kernel_split_merges_in_its_last_blocks_on_the_emulator(within_budget):
    """`--merge last-block` on rmsnorm's gradient: dg's merge runs in the partial kernel's
    last block of each output tile (3 kernels in 2 launches), run at r=70, c=33."""
    from napkin.pipeline import run_plan
    d = napkin.grad(napkin.load("rmsnorm"))
    p = plan(d, "h100", {"r": 16384, "c": 1024}, merge="last-block")
    assert p.split is not None and p.split.alone is not None and p.tail is not None
    inputs = random_inputs(d, {"r": 70, "c": 33}, 4)
    within_budget(d, inputs, run_plan(p, inputs, {"r": 70, "c": 33}))
