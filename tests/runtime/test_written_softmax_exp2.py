"""Softmax written out in base 2 (`E = exp2(S - max[x](S))`, `E / sum[x](E)`, as kernels
that fold log2(e) into the scale write it) is the natural softmax of `S * ln 2`
(compiler/written.py): it was not recognised, so causal attention written so ran its
scores and row maximum on the CUDA cores, then E * V / l (2 kernels, 762 us at b=1 h=16
q=x=4096 d=16, h100 model); now one FlashAttention-2 kernel skipping the masked chunks
(52.4 us). Emulated against float64 with fully masked rows (NaN as written), `E / l` and
`E * V / l`, on FlashAttention and on the CUDA cores' softmax rows; its gradient against
finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION as ENGINE

from ..compiler.test_grad import _check_against_finite_differences, _random_inputs
from .test_written_empty_rows import qkv, run_checked, scores, softmaxes

ATTENTION = """axis q, x
axis d = 16
in Q[q d]: {dt}
in K[x d]: {dt}
in V[x d]: {dt}
S[q x] = where(x <= q - 20, Q * K * 0.36067376, -inf)
E[q x] = exp2(S - max[x](S))
O[q d] = {O}
out O: {dt}
"""
SOFTMAX = """axis q, x
in S[q x]: {dt}
E[q x] = exp2(S - max[x](S))
P[q x] = E / sum[x](E)
out P: f32
"""
FORMS = {"div": "E / sum[x](E) * V", "contract": "E * V / sum[x](E)"}


def test_base_two_softmax_is_flash_attention():
    text = ATTENTION.format(dt="f16", O=FORMS["div"]).replace("axis q, x", "axis b, h, q, x")
    text = text.replace("[q ", "[b h q ").replace("[x d]", "[b h x d]")
    p = plan(napkin.load(text), "h100", {"b": 1, "h": 16, "q": 4096, "x": 4096})
    (kp,) = p.kernels
    assert kp.schedule.engine == ENGINE


@pytest.mark.parametrize("form", FORMS)
def test_base_two_attention_emulated_with_masked_rows(form):
    p, nans = run_checked(ATTENTION.replace("{O}", FORMS[form]), "f16", qkv,
                          dict(q=37, x=37))
    assert softmaxes(p) == [(ENGINE, ("x",), form)] and nans > 0


def test_base_two_softmax_rows_emulated():
    p, nans = run_checked(SOFTMAX, "f32", scores, dict(q=7, x=129))
    assert [w for _, _, w in softmaxes(p)] == ["div"] and nans > 0


def test_base_two_attention_gradient_matches_finite_differences():
    """Reverse mode reads the softmax of S ln 2 (canonical.softmaxes): its dS carries ln 2."""
    text = ATTENTION.format(dt="f32", O=FORMS["contract"]).replace("q - 20", "q")
    d = napkin.load(text, d=5)
    grad = napkin.grad(d)
    assert "softmax[x](S * 0.69314718" in grad.source.text
    rng = np.random.default_rng(5)
    inputs = _random_inputs(d, rng, {"q": 6, "x": 7, "d": 5})
    _check_against_finite_differences(d, grad, inputs, {"dO": rng.standard_normal((6, 5))}, rng)
