"""Every written form of one additive mask reaches the plan of `Q * K / 4 + where(x <= q, 0,
-inf)` (compiler/mask_forms.py): the scale folded into the exponent, chunks the mask hides
skipped. At b=1 h=16 q=x=4096 d=16 with a logsumexp beside (h100 model) `(Q * K + M) / 4` and
its named-mask form took 52.5 us (the scale unfolded), `Q * K / 4 - where(x > q, inf, 0)`
187 us (no chunk skipped), `Q * K / 4 + 2 * where(...)` 99.4 us; each now 48.2 us. A sliding
window subtracted, `- where(x > q or q - x >= size(w), inf, 0)`, took 325.4 us, named and
scaled 171.8 us; now 11.9 us both. A bias that is not a mask (an input B[q x], ALiBi's
`slope * (q - x)`) stays a term of the scores on the tensor cores, its mask's chunks
skipped; a row sum of P beside no longer stops the skipping (masking.chunk_mask: 211.5 ->
67.5 us with a bf16 bias, 296.6 -> 110.3 us with ALiBi's, 178.9 -> 48.3 us with none, h100
model). Plans asserted; the emulated CUDA at odd sizes against the float64 reference, a
first row with no key."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan

from .test_flash_row_state import HEAD16, _site

TEXT = HEAD16 + """{pre}S[b h q x] = {scores}
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
L[b h q] = logsumexp[x](S)
out O: f32
out L: f32
"""
BASE = ("", "Q * K / 4 + where(x <= q, 0, -inf)")
FORMS = {
    "parenthesised": ("", "(Q * K + where(x <= q, 0, -inf)) / 4"),
    "mask first": ("", "where(x <= q, 0, -inf) + Q * K * 0.25"),
    "subtracted": ("", "Q * K / 4 - where(x > q, inf, 0)"),
    "scaled mask": ("", "Q * K / 4 + 2 * where(x <= q, 0, -inf)"),
    "named": ("M[q x] = where(x <= q, 0, -inf)\n", "Q * K / 4 + M"),
    "named in parentheses": ("M[q x] = where(x > q, -inf, 0)\n", "(Q * K + M) / 4"),
    "named subtracted": ("M[q x] = where(x > q, inf, 0) / 8\n", "(Q * K - M) / 4"),
}
BIG = {"b": 1, "h": 16, "q": 4096, "x": 4096}


def _text(form, dtype="f16") -> str:
    pre, scores = form
    return TEXT.format(dtype=dtype, pre=pre, scores=scores)


@pytest.mark.parametrize("name", FORMS)
def test_every_form_of_the_mask_reaches_one_plan(name):
    base = plan(napkin.load(_text(BASE)), "h100", BIG)
    p = plan(napkin.load(_text(FORMS[name])), "h100", BIG)
    assert len(p.kernels) == 1 and len(_site(p).lse) == 1
    (kp,), (kb,) = p.kernels, base.kernels
    assert kp.model.scale is not None and kp.model.mask == kb.model.mask
    assert kp.schedule.choice == kb.schedule.choice
    assert p.time == pytest.approx(base.time, rel=1e-6), (p.time, base.time)


WINDOW = HEAD16.replace("axis d = 16", "axis d = 16\naxis w = 256") + TEXT[len(HEAD16):]
WINDOWS = {"added": ("", "Q * K / 4 + where(x <= q and q - x < size(w), 0, -inf)"),
           "subtracted": ("", "Q * K / 4 - where(x > q or q - x >= size(w), inf, 0)"),
           "named": ("W[q x] = where(q - x >= size(w) or q < x, -inf, 0)\n",
                     "(W + Q * K) * 0.25")}


@pytest.mark.parametrize("name", [pytest.param("subtracted", marks=pytest.mark.thorough), "named"])
def test_every_form_of_a_sliding_window_reaches_one_plan(name):
    def planned(form):
        pre, scores = WINDOWS[form]
        return plan(napkin.load(WINDOW.format(dtype="f16", pre=pre, scores=scores)), "h100", BIG)
    p, base = planned(name), planned("added")
    assert p.kernels[0].model.mask is not None and p.kernels[0].model.scale is not None
    assert p.kernels[0].schedule.choice == base.kernels[0].schedule.choice
    assert p.time == pytest.approx(base.time, rel=1e-6), (p.time, base.time)

@pytest.mark.parametrize("name,dtype,pre", [
    ("named subtracted", "bf16", "x > q"),
    pytest.param("parenthesised", "f16", "x <= q", marks=pytest.mark.thorough),
    pytest.param("scaled mask", "bf16", "x <= q", marks=pytest.mark.thorough)])
def test_forms_emulated_at_odd_sizes(name, dtype, pre, within_budget):
    """Strict (`x >= q` masked): row 0 has no key (O 0, L -inf)."""
    pre_, scores = FORMS[name]
    strict = (pre_.replace(pre, "x >= q"), scores.replace(pre, "x >= q"))
    d = napkin.load(_text(strict, dtype))
    shape = {"b": 1, "h": 2, "q": 37, "x": 65}
    p = plan(d, "h100", shape, {"stream": {"x": 16}, "group": {"q": 16}})
    assert len(p.kernels) == 1 and p.kernels[0].model.mask is not None
    assert p.kernels[0].model.scale is not None
    inputs = random_inputs(d, shape, 3)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)


BIAS = HEAD16 + """in B[q x]: bf16
in slope[h]: f32
S[b h q x] = {scores}
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
L[b h q] = logsumexp[x](S)
T[b h q] = sum[x](P)
out O: f32
out L: f32
out T: f32
"""
BIASES = {"input": "Q * K / 4 + B + where(x < q, 0, -inf)",
          "alibi": "(Q * K - slope * float(q - x) + where(x < q, 0, -inf)) / 4"}
# h100 model: 67.5 and 110.3 us; with no chunk skipped (before) 211.5 and 296.6 us
BOUND = {"input": 70e-6, "alibi": 115e-6}


@pytest.mark.parametrize("bias", BIASES)
def test_a_bias_stays_on_the_tensor_cores_its_mask_skipped(bias):
    p = plan(napkin.load(BIAS.format(dtype="f16", scores=BIASES[bias])), "h100", BIG)
    site = _site(p)
    assert sorted(site.lse_kinds) == ["logsumexp", "psum"], site.lse_kinds
    assert p.kernels[0].model.mask == ("lt", ("index", "x"), ("index", "q"))
    assert p.time < BOUND[bias], p.time


@pytest.mark.parametrize("bias,dtype", [("input", "bf16"),
                                        pytest.param("alibi", "f16", marks=pytest.mark.thorough),
                                        pytest.param("alibi", "f32",     # (the CUDA cores)
                                                     marks=pytest.mark.thorough)])
def test_a_bias_emulated_at_odd_sizes(bias, dtype, within_budget):
    d = napkin.load(BIAS.format(dtype=dtype, scores=BIASES[bias]))
    shape = {"b": 1, "h": 2, "q": 37, "x": 65}
    p = plan(d, "h100", shape, {"stream": {"x": 16}, "group": {"q": 16}})
    assert len(p.kernels) == 1 and p.kernels[0].model.mask is not None
    inputs = random_inputs(d, shape, 4)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)
