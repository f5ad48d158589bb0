"""Nested reductions as statements of their own (compiler/nested.py): the new statements, and
fusion's choice at them: a boundary at an unnamed intermediate where the model predicts it
faster (`gelu(A * B) * D` as its named twin), one kernel where it does not (FlashAttention
written `softmax[x](S) * V`); explain's words; the emitted CUDA on the CPU emulator against
the float64 reference at odd sizes."""

from __future__ import annotations

import functools

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import ir, schedule
from napkin.compiler.canonical import canonicalize
from napkin.compiler.nested import separate_nested
from napkin.compiler.plan import plan
from napkin.explain import render_text, report
from napkin.pipeline import lowered, run_plan
from napkin.runtime import compare
from napkin.runtime.interpret import interpret

CHAIN = """\
axis i, l, j, k
in A[i l]: f16
in B[l j]: f16
in D[j k]: f16
C[i k] = gelu(A * B) * D
out C: f16
"""
CHAIN_NAMED = CHAIN.replace("C[i k] = gelu(A * B) * D",
                            "T[i j] = gelu(A * B)\nC[i k] = T * D")
SIZES = {"i": 256, "l": 256, "j": 256, "k": 256}

ATTENTION = """\
axis b, h, q, x
axis d = 64
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = Q * K / sqrt(size(d))
O[b h q d] = softmax[x](S) * V
out O: f16
"""

LAYERNORM_LINEAR = """\
axis t, c, o
in X[t c]: f16
in W[c o]: f16
Y[t o] = ((X - mean[c](X)) * rsqrt(mean[c]((X - mean[c](X)) * (X - mean[c](X))) + 1e-5)) * W
out Y: f16
"""
LAYERNORM_NAMED = LAYERNORM_LINEAR.replace(
    "Y[t o] = ((X - mean[c](X)) * rsqrt(mean[c]((X - mean[c](X)) * (X - mean[c](X))) + 1e-5)) * W",
    "N[t c] = (X - mean[c](X)) * rsqrt(mean[c]((X - mean[c](X)) * (X - mean[c](X))) + 1e-5)\n"
    "Y[t o] = N * W")


def _equations(g) -> dict[int, str]:
    return {e.stmt: e.name for e in g.graph["equations"]}


@functools.cache
def _chain_plans():
    return (plan(napkin.load(CHAIN), "h100", SIZES), plan(napkin.load(CHAIN_NAMED), "h100", SIZES))


# -- the pass ---------------------------------------------------------------------------------

def test_the_inner_product_gets_a_statement_with_the_gelu_applied_to_it():
    g = separate_nested(canonicalize(napkin.load(CHAIN).ir))
    eqs = _equations(g)
    assert sorted(eqs.values()) == ["C", "C:gelu(contract[l])"]
    new = next(s for s, name in eqs.items() if name != "C")
    ops = {type(ir.op(g, n)).__name__ + getattr(ir.op(g, n), "fn", "")
           for n in g if g.nodes[n]["stmt"] == new}
    assert ops == {"Contract", "Mapgelu"}
    outer = [n for n in g if g.nodes[n]["stmt"] == next(s for s in eqs if s != new)]
    assert sum(isinstance(ir.op(g, n), ir.Contract) for n in outer) == 1
    assert dict(g.graph["nested"]) == {new: next(s for s in eqs if s != new)}


def test_a_statement_without_nested_reductions_is_left_alone():
    d = napkin.load(CHAIN_NAMED)
    g = canonicalize(d.ir)
    out = separate_nested(g)
    assert _equations(out) == _equations(g) and "nested" not in out.graph
    assert {n: out.nodes[n]["stmt"] for n in out} == {n: g.nodes[n]["stmt"] for n in g}


def test_a_nested_reduction_written_twice_is_computed_once_and_names_stay_unique():
    d = napkin.load("axis t, c\nin X[t c]: f32\nin Y[t c]: f32\n"
                    "R[t] = sum[c](X - max[c](X)) * sum[c](Y - max[c](Y)) + "
                    "sum[c](exp(X - max[c](X)))\nout R: f32\n")
    g = separate_nested(canonicalize(d.ir))
    names = sorted(_equations(g).values())
    assert names == ["R", "R:max[c]", "R:max[c]#2"], names
    maxima = [n for n in g if isinstance(ir.op(g, n), ir.Reduce) and ir.op(g, n).fn == "max"]
    assert len(maxima) == 2 and {g.nodes[n]["stmt"] for n in maxima} == \
        {s for s, name in _equations(g).items() if name != "R"}
    sums = [n for n in g if isinstance(ir.op(g, n), ir.Reduce) and ir.op(g, n).fn == "sum"]
    assert len(sums) == 3


# -- fusion's choice --------------------------------------------------------------------------

def test_the_chain_plans_as_its_named_twin():
    """gelu(A * B) * D at 256 on the H100: the product stored, two tensor-core kernels, within
    5% of the named twin (before nested.py: a split of l storing A * B's partials, 12 us,
    model)."""
    nested, named = _chain_plans()
    assert len(nested.kernels) == len(named.kernels) == 2
    assert [kp.schedule.engine for kp in nested.kernels] == \
        [kp.schedule.engine for kp in named.kernels] == [schedule.PRODUCT] * 2
    assert nested.time <= 1.05 * named.time, (nested.time, named.time)
    first = nested.kernels[0].kernel
    assert [ir.type_of(nested.graph, n).axes for n in first.stores] == [("i", "j")]


def test_explain_names_the_stored_intermediate_and_the_boundary():
    text = render_text(report(_chain_plans()[0]))
    assert "kernel k0: computes C:gelu(contract[l])" in text
    assert "boundary: C:gelu(contract[l]) goes through global memory: fused it would take" in text
    assert "total: 2 kernel(s)" in text


def test_the_chain_emulated_at_odd_sizes_matches_the_reference():
    """The two kernels' CUDA (planned at 256) on the emulator at sizes off every tile."""
    d = napkin.load(CHAIN)
    p = _chain_plans()[0]
    small = {"i": 77, "l": 40, "j": 130, "k": 24}
    inputs = random_inputs(d, small, 7)
    out = run_plan(p, inputs, small)
    for name, verdict in compare.against_reference(d, inputs, out).items():
        assert verdict.ok, verdict.message


def test_generated_names_do_not_reach_the_cuda():
    from ..fuzz.injection import token_problems
    text = lowered(_chain_plans()[0])[1]
    assert "gelu(contract" not in text and "C:" not in text
    assert token_problems(text) == []


@pytest.mark.parametrize("sizes", [{"b": 4, "h": 16, "q": 4096, "x": 4096},
                                   {"b": 1, "h": 3, "q": 77, "x": 130}])
def test_attention_written_nested_stays_one_flash_attention_kernel(sizes):
    p = plan(napkin.load(ATTENTION), "h100", sizes)
    assert [kp.schedule.engine for kp in p.kernels] == [schedule.ATTENTION]
    assert "O:softmax[x]" in _equations(p.graph).values()
    library = plan(napkin.load("attention"), "h100", sizes)
    assert p.time == pytest.approx(library.time, rel=1e-9)


@pytest.mark.parametrize("sizes", [{"t": 4096, "c": 4096, "o": 4096},
                                   {"t": 77, "c": 130, "o": 77}])
def test_layernorm_linear_written_nested_is_no_slower_than_named(sizes):
    nested = plan(napkin.load(LAYERNORM_LINEAR), "h100", sizes)
    named = plan(napkin.load(LAYERNORM_NAMED), "h100", sizes)
    assert nested.time <= named.time * (1 + 1e-9), (nested.time, named.time)
    # the three mean[c](X) are one statement (nested.py computes an equal op once)
    assert sum(":mean[c]" in name for name in _equations(nested.graph).values()) == 1


@pytest.mark.thorough
def test_random_diagrams_with_nested_reductions_match_the_reference():
    """The fuzzer's random diagrams that nested.py cuts (some 4% of them), interpreted or
    emulated on three targets, one in three with a split drawn, against the float64
    reference (the whole fuzzer meets few of them)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from ..fuzz.gen import diagrams
    from ..fuzz.harness import Recorder
    recorder, seen = Recorder(), []

    @settings(max_examples=600, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(diagrams(), st.sampled_from(("h100", "a100", "hopper-toy")), st.booleans())
    def check(case, target, emulate):
        g = separate_nested(canonicalize(napkin.load(case.text).ir))
        if not g.graph.get("nested"):
            return
        seen.append(case)
        recorder.check(case, emulate=emulate, target=target, splits=True)
    check()
    assert len(seen) >= 10, len(seen)


ONE_LINE = """\
axis b, h, q, x
axis d = 64
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
O[b h q d] = softmax[x](sum[d](Q * K) / sqrt(size(d))) * V
out O: f16
"""


def test_attention_in_one_line_with_an_explicit_sum_is_flash_attention():
    """`sum[d](Q * K)` is the contraction Q K (canonical._summed_product): attention written
    in one line is FlashAttention-2, predicted as the library's (it was a CUDA-core kernel
    making the product over d: 16.9 ms against 646 us at b=4 h=16 N=4096, h100, model);
    on the emulator at odd sizes against the float64 reference."""
    d = napkin.load(ONE_LINE)
    g = canonicalize(d.ir)
    assert not any(isinstance(ir.op(g, n), ir.Reduce) for n in g)
    sizes = {"b": 4, "h": 16, "q": 4096, "x": 4096}
    p = plan(d, "h100", sizes)
    assert [kp.schedule.engine for kp in p.kernels] == [schedule.ATTENTION]
    assert p.time == pytest.approx(plan(napkin.load("attention"), "h100", sizes).time,
                                   rel=1e-9)
    # the statements cut from O and fused back are O's own: explain lists O alone
    assert "kernel k0: computes O\n" in render_text(report(p))
    small = {"b": 1, "h": 2, "q": 37, "x": 45}
    inputs = random_inputs(d, small, 5)
    out = run_plan(p, inputs, small)
    for name, verdict in compare.against_reference(d, inputs, out).items():
        assert verdict.ok, verdict.message


def test_an_explicit_sum_of_a_computed_operand_is_its_contraction():
    """`sum[x](softmax[x](S) * V)`: canonical._summed_product took loaded operands only, so
    the probabilities times V were made over [b h q x d] and summed (3 kernels, 428 us at
    b=4 h=8 N=1024, h100, model); now the contraction P V, FlashAttention as the library's,
    interpreted at odd sizes against the float64 reference."""
    d = napkin.load(ONE_LINE.replace("softmax[x](sum[d](Q * K) / sqrt(size(d))) * V",
                                     "sum[x](softmax[x](sum[d](Q * K) / sqrt(size(d))) * V)"))
    sizes = {"b": 2, "h": 4, "q": 1024, "x": 1024}
    p = plan(d, "h100", sizes)
    assert [kp.schedule.engine for kp in p.kernels] == [schedule.ATTENTION]
    assert p.time == pytest.approx(plan(napkin.load("attention"), "h100", sizes).time,
                                   rel=1e-9)
    small = {"b": 1, "h": 2, "q": 17, "x": 37}
    inputs = random_inputs(d, small, 3)
    p = plan(d, "h100", small)
    for name, verdict in compare.against_reference(d, inputs, interpret(p, inputs)).items():
        assert verdict.ok, verdict.message


# -- products side by side ----------------------------------------------------------------

SWIGLU = """\
axis t, m, f, o
in X[t m]: f16
in Wg[m f]: f16
in Wu[m f]: f16
in Wd[f o]: f16
H[t f] = silu(sum[m](X * Wg)) * sum[m](X * Wu)
Y[t o] = H * Wd
out Y: f16
"""


@functools.cache
def _swiglu_plan():
    return plan(napkin.load(SWIGLU), "h100", {"t": 256, "m": 256, "f": 256, "o": 256})


def test_two_products_side_by_side_plan_as_the_named_swiglu():
    """swiglu in one line: the two products of H were one statement, so one kernel on the
    CUDA cores (193 us at 1024, model, against the library's 37.4 us); now each product a
    statement, and the plan is the library's: two tensor-core kernels, the gate and up
    projections one (compiler/duals.py; 7.11 us at 256, model, the library's too; three
    kernels and 10.59 us before)."""
    p = _swiglu_plan()
    assert [kp.schedule.engine for kp in p.kernels] == [schedule.PRODUCT] * 2
    named = plan(napkin.load("swiglu"), "h100", {"t": 256, "m": 256, "f": 256, "o": 256})
    assert p.time == pytest.approx(named.time, rel=1e-9)


SMALL_SWIGLU = {"t": 128, "m": 128, "f": 128, "o": 128}


@functools.cache
def _small_swiglu_plan():
    return plan(napkin.load(SWIGLU), "h100", SMALL_SWIGLU)


def test_one_line_swiglu_is_specialised_as_the_named_one():
    """At the library's shape 128 (m, o dynamic and given) the named swiglu plans one chain
    of products with m and o specialised (5.43 us, h100 model); the one-line spelling planned
    two kernels, H on the CUDA cores, at 7.26 us: specialise read its candidates off the
    diagram's IR, where `sum[m](X * Wg)` is a sum of a product, no contraction feeding one
    (specialise._canonical reads the canonical IR, as the planner)."""
    p = _small_swiglu_plan()
    named = plan(napkin.load("swiglu"), "h100", SMALL_SWIGLU)
    assert p.specialised == named.specialised == {"m": 128, "o": 128}, p.specialised
    assert [kp.schedule.engine for kp in p.kernels] == [schedule.CHAIN]
    assert p.time == pytest.approx(named.time, rel=1e-9)


@pytest.mark.thorough       # (the plan test above is the regression; this runs its CUDA)
def test_one_line_swiglu_specialised_emulated_at_odd_sizes_matches_the_reference():
    d = napkin.load(SWIGLU)
    small = {"t": 37, "m": 128, "f": 33, "o": 128}     # (m and o as specialised)
    inputs = random_inputs(d, small, 7)
    out = run_plan(_small_swiglu_plan(), inputs, small)
    for name, verdict in compare.against_reference(d, inputs, out).items():
        assert verdict.ok, verdict.message


@pytest.mark.thorough       # (the plan test above is the regression; this runs its CUDA)
def test_two_products_side_by_side_emulated_at_odd_sizes_match_the_reference():
    d = napkin.load(SWIGLU)
    small = {"t": 37, "m": 40, "f": 33, "o": 17}
    inputs = random_inputs(d, small, 5)
    out = run_plan(_swiglu_plan(), inputs, small)
    for name, verdict in compare.against_reference(d, inputs, out).items():
        assert verdict.ok, verdict.message
