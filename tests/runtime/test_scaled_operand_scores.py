"""A scalar written on a factor of attention's scores (`0.125 * Q * K`, `Q / 8 * K`: the
einsum rule contracts `0.125 * Q` with K) leaves the contraction (compiler/canonical.py,
_hoisted), and so does a head's (`Q * g[h] * K`): FlashAttention loads Q and K as they are
and scales its scores. Before, the scaled Q was a computed operand, so no FlashAttention: S
stored by one product, a softmax kernel, P * V by another (3 kernels, 1.14 ms at b=1 h=16
q=x=4096 d=64, h100 model, against 163 us for `Q * K * 0.125`; `Q * g * K` 2.87 ms against
167 us). Plans asserted; emulated at odd sizes against float64, a negative scale beside the
row statistics from the softmax's state (its maximum is the scaled scores', not the
product's)."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan

from .test_flash_row_state import _site

TEXT = """axis b, h, q, x
axis d = {d}
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
in g[h]: f32
S[b h q x] = where(x <= q, {scores}, -inf)
O[b h q d] = softmax[x](S) * V
M[b h q] = max[x](S)
L[b h q] = logsumexp[x](S)
out O: f16, M: f32, L: f32
"""
# each spelling, and the same scores written with the factor after the product
SPELLINGS = {"0.125 * Q * K": "Q * K * 0.125", "Q * 0.125 * K": "Q * K * 0.125",
             "Q / 8 * K": "Q * K / 8", "Q * (K / sqrt(size(d)))": "Q * K / sqrt(size(d))",
             "Q * g * K": "Q * K * g"}


@pytest.mark.parametrize("scores", SPELLINGS)
def test_a_scaled_factor_of_the_scores_is_flash_attention(scores):
    shape = {"b": 1, "h": 16, "q": 2048, "x": 2048}
    p = plan(napkin.load(TEXT.format(d=64, scores=scores)), "h100", shape)
    assert sorted(_site(p).lse_kinds) == ["logsumexp", "max"]
    written = plan(napkin.load(TEXT.format(d=64, scores=SPELLINGS[scores])), "h100", shape)
    assert p.kernels[0].schedule.choice == written.kernels[0].schedule.choice
    assert p.time == pytest.approx(written.time, rel=0.01)


def _emulated(scores, shape, within_budget, seed=3):
    d = napkin.load(TEXT.format(d=16, scores=scores))
    p = plan(d, "h100", shape, {"stream": {"x": 16}})
    assert len(_site(p).lse) == 2
    inputs = random_inputs(d, shape, seed)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)


def test_a_negative_scale_on_the_query_emulated(within_budget):
    _emulated("-0.25 * Q * K", {"b": 1, "h": 2, "q": 37, "x": 37}, within_budget)


@pytest.mark.thorough       # (g++ builds each kernel: about 2.5 CPU-s)
@pytest.mark.parametrize("scores", SPELLINGS)
def test_scaled_factors_emulated_at_odd_sizes(scores, within_budget):
    _emulated(scores, {"b": 2, "h": 1, "q": 65, "x": 17}, within_budget, seed=5)
