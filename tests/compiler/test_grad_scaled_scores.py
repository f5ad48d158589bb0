"""The gradient of attention whose scale is written on a factor of its scores (`0.125 * Q *
K`, a head's `Q * g[h] * K`) is that of the scale written after the product
(canonical.softmaxes takes such factors out of the scores before reverse mode): it
contracted the cotangent dS with the scaled query `0.125 * Q`, a computed operand, so the
products around it stored the scores (6 kernels, 1.70 ms at b=1 h=16 q=x=4096 d=64, h100
model, against 2 kernels, 598 us). Against finite differences, and planned as the other."""

from __future__ import annotations

import re

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan

from .test_grad import _check_against_finite_differences, _random_inputs

TEXT = """axis b, h, q, x
axis d = {d}
in Q[b h q d]: f32
in K[b h x d]: f32
in V[b h x d]: f32
{g}S[b h q x] = where(x <= q, {scores}, -inf)
O[b h q d] = softmax[x](S) * V
out O: f32
"""
SPELLINGS = {"0.125 * Q * K": "Q * K * 0.125", "Q * g * K": "Q * K * g",
             "Q * (K / sqrt(size(d)))": "Q * K / sqrt(size(d))"}


def _body(grad) -> list[str]:
    """The gradient's statements, temporaries' numbers aside."""
    return [re.sub(r"\b([gt])\d+", r"\1#", line) for line in grad.source.text.splitlines()
            if not line.startswith("#")]


@pytest.mark.parametrize("scores", SPELLINGS)
def test_a_scaled_factor_of_the_scores_differentiates_as_the_scale_after(scores):
    g = "in g[h]: f32\n" if "g" in scores else ""
    d = napkin.load(TEXT.format(d=5, scores=scores, g=g))
    grad = napkin.grad(d)
    assert _body(grad) == _body(napkin.grad(TEXT.format(d=5, scores=SPELLINGS[scores], g=g)))
    rng = np.random.default_rng(11)
    sizes = {"b": 2, "h": 3, "q": 5, "x": 7, "d": 5}
    inputs = _random_inputs(d, rng, sizes)
    cot = {"dO": rng.standard_normal((2, 3, 5, 5))}
    _check_against_finite_differences(d, grad, inputs, cot, rng)


def test_the_gradient_of_a_scaled_query_plans_as_flash_attentions():
    shape = {"b": 1, "h": 16, "q": 4096, "x": 4096}
    text = TEXT.replace("f32", "f16")
    first = plan(napkin.grad(text.format(d=64, scores="0.125 * Q * K", g="")), "h100", shape)
    after = plan(napkin.grad(text.format(d=64, scores="Q * K * 0.125", g="")), "h100", shape)
    assert len(first.kernels) == len(after.kernels)
    assert first.time == pytest.approx(after.time, rel=0.01)
