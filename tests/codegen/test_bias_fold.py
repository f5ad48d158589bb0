"""A bias beside attention's softmax scale folded into the exponent (compiler/bias_fold.py):
`S = Q K / sqrt(d) + B` kept the scale as its own op (Model.scale None: the scale and the
sum charged an op each, nvcc fused them into one FFMA) and ALiBi's `slope * (x - q)` added
its FMUL per score. Now the scores stay unscaled, t = fma(B, c^-1, X) (ALiBi:
fma(slope / c, x - q, X), slope / c once a block), and c log2(e) joins the exponent's FFMA
as without a bias. ALiBi's main loop (library diagram, h100 plan at b=4 h=16 q=x=4096,
sm_90, static SASS): 1429 -> 764 instructions, 44.7 -> 23.9 a score (the slope's powf had
stayed in the loop). Model and CUDA asserted; the emulated CUDA at odd sizes against the
float64 reference (a first row with no key, a bias input, ALiBi's product)."""

from __future__ import annotations

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.pipeline import run_plan

BIASED = """axis b, h, q, x
axis d = 16
in Q[b h q d]: {dtype}
in K[b h x d]: {dtype}
in V[b h x d]: {dtype}
in B[b h q x]: {dtype}
S[b h q x] = {scores}
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
L[b h q] = logsumexp[x](S)
out O: f32
out L: f32
"""
INPUT = "where(x < q, B + Q * K / sqrt(size(d)), -inf)"
ALIBI = "where(x <= q, Q * K / sqrt(size(d)) + 2 ** (-8 * (h + 1) / size(h)) * (x - q), -inf)"
SLOPE = "2 ** (-8 * (h + 1) / size(h))"
# ALiBi's scores as the language lets them be written, each folded as the canonical one
# (bias_fold.biased): the scale outside the sum, a product by the scale's reciprocal, the
# bias subtracted, the slope a quotient, the mask added
FORMS = {
    "outside": f"where(x <= q, (Q * K + {SLOPE} * (x - q)) / sqrt(size(d)), -inf)",
    "reciprocal": f"where(x <= q, 0.25 * (Q * K) + (x - q) * {SLOPE}, -inf)",
    "subtracted": f"where(x <= q, Q * K / sqrt(size(d)) - {SLOPE} * (q - x), -inf)",
    "quotient": "where(x <= q, (Q * K - (q - x) / 2 ** (8 * (h + 1) / size(h))) * 0.25, -inf)",
    "added_mask": f"(Q * K + {SLOPE} * (x - q)) / 4 + where(x <= q, 0, -inf)",
}


def _ops(p, kp) -> dict[str, set]:
    """The kernel's folded ops by their op name."""
    out: dict[str, set] = {}
    for n in kp.model.folded:
        out.setdefault(ir.op(p.graph, n).fn, set()).add(n)
    return out


def test_the_model_folds_the_scale_and_alibis_product():
    shape = {"b": 4, "h": 16, "q": 4096, "x": 4096}
    alibi = plan(napkin.load("alibi_attention"), "h100", shape)
    biased = plan(napkin.load(BIASED.format(dtype="f16", scores=INPUT)), "h100", shape)
    for p in (alibi, biased):
        assert p.kernels[0].schedule.engine == ATTENTION
    (a,), (b,) = alibi.kernels, biased.kernels
    assert a.model.scale in a.model.folded and len(a.model.folded) == 2
    assert {ir.op(alibi.graph, n).fn for n in a.model.folded} == {"div", "mul"}
    assert b.model.folded == {b.model.scale}        # (an input: its sum's FFMA only)
    cuda = render(lower(alibi))
    assert "const float qka = " in cuda and "fmaf(qka, (float)(" in cuda
    assert "fmaf((float)(" in render(lower(biased))


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_of_alibi_folds_as_the_canonical_one(form):
    """The scale folded into the exponent and the slope's product (quotient) into t's FFMA:
    the model's folded ops and the lowering's one FFMA per score, as the library diagram's."""
    shape = {"b": 4, "h": 16, "q": 4096, "x": 4096}
    p = plan(napkin.load(BIASED.format(dtype="f16", scores=FORMS[form])), "h100", shape)
    (kp,) = p.kernels
    assert kp.schedule.engine == ATTENTION and kp.model.scale in kp.model.folded
    assert len(kp.model.folded) == 2
    cuda = render(lower(p))
    assert "const float qka = " in cuda and "fmaf(qka, (float)(" in cuda


@pytest.mark.parametrize("scores,dtype", [
    (ALIBI, "f16"),
    (FORMS["outside"], "f16"),
    *[pytest.param(FORMS[f], "f16", marks=pytest.mark.thorough)
      for f in sorted(FORMS) if f != "outside"],
    # (an input bias folded: test_mask_forms' emulated `Q * K / 4 + B + where(...)` too)
    pytest.param(INPUT, "bf16", marks=pytest.mark.thorough)])
def test_a_folded_bias_emulated_at_odd_sizes(scores, dtype, within_budget):
    """Row 0 has no key (`x < q`: O 0, L -inf)."""
    d = napkin.load(BIASED.format(dtype=dtype, scores=scores))
    shape = {"b": 1, "h": 3, "q": 37, "x": 65}
    p = plan(d, "h100", shape, {"stream": {"x": 16}, "group": {"q": 16}})
    (kp,) = p.kernels
    assert kp.schedule.engine == ATTENTION and kp.model.scale in kp.model.folded
    inputs = random_inputs(d, shape, 3)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)
