"""A row sum or maximum of the softmax's probabilities beside attention is its final state too
(compiler/row_state.py: sum[x](P) = l / l, max[x](P) = exp(m - m) / l, ir.empty_row's 0 or
NaN on a row with no key): `Z = sum[x](P)` beside O kept the softmax from pairing with P V (a
second pass: 2 passes on the CUDA cores, 1.21 ms at b=1 h=16 q=x=4096 d=16, h100 model);
now FlashAttention stores them from m and l (79.5 us, as attention with its logsumexp), and
the CUDA cores (f32) fold a running max and sum of the scores for them in the one pass.
Plans asserted; the emulated CUDA at odd sizes, masked and not, f16, bf16 and f32, against
the float64 reference."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.pipeline import run_plan

from .test_flash_row_state import HEAD16, SCORES, _site

TEXT = HEAD16 + """S[b h q x] = {scores}
P[b h q x] = {softmax}
O[b h q d] = P * V
Z[b h q] = sum[x](P)
W[b h q] = max[x](P)
L[b h q] = logsumexp[x](S)
out O: f32
out Z: f32
out W: f32
out L: f32
"""
BUILT_IN = "softmax[x](S)"
WRITTEN = "exp(S - max[x](S)) / sum[x](exp(S - max[x](S)))"   # (NaN on an empty row)


def _text(scores="plain", dtype="f16", softmax=BUILT_IN) -> str:
    return TEXT.format(scores=SCORES[scores], dtype=dtype, softmax=softmax)


def test_probability_statistics_beside_attention_are_its_state():
    shape = {"b": 1, "h": 16, "q": 4096, "x": 4096}
    p = plan(napkin.load(_text()), "h100", shape)
    site = _site(p)            # (one FlashAttention kernel)
    assert sorted(site.lse_kinds) == ["logsumexp", "pmax", "psum"], site.lse_kinds
    alone = plan(napkin.load(_text().replace("out Z: f32\nout W: f32\n", "")), "h100", shape)
    assert alone.time <= p.time <= 1.02 * alone.time, (p.time, alone.time)


def test_on_the_cuda_cores_they_stream_in_one_pass():
    """f32 operands (no mma.sync): one pass, the statistics a running max and sum of the
    scores each (not P, which the paired softmax never normalises per chunk)."""
    p = plan(napkin.load(_text(dtype="f32")), "h100", {"b": 1, "h": 2, "q": 37, "x": 65})
    (kp,) = p.kernels
    assert kp.schedule.engine != ATTENTION and kp.model.streaming.passes == 1


@pytest.mark.parametrize("scores,dtype,softmax", [
    ("plain", "f16", BUILT_IN), ("strict", "bf16", BUILT_IN), ("causal", "f32", BUILT_IN),
    ("strict", "f32", BUILT_IN),
    pytest.param("strict", "f16", WRITTEN, marks=pytest.mark.thorough),
    pytest.param("causal", "bf16", BUILT_IN, marks=pytest.mark.thorough)])
def test_probability_statistics_emulated_at_an_odd_size(scores, dtype, softmax, within_budget):
    """`strict` leaves row 0 no key: 0 (the built-in softmax) or NaN (written out)."""
    d = napkin.load(_text(scores, dtype, softmax))
    shape = {"b": 2, "h": 3, "q": 37, "x": 65}
    p = plan(d, "h100", shape, {"stream": {"x": 16}} if dtype != "f32" else {})
    if dtype != "f32":
        assert len(_site(p).lse) == 3
    inputs = random_inputs(d, shape, 7)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)


GQA = """axis b, g, r, q, x
axis d = 16
in Q[b g r q d]: f16
in K[b g x d]: f16
in V[b g x d]: f16
S[b g r q x] = where(x <= q, Q * K / sqrt(size(d)), -inf)
P[b g r q x] = softmax[x](S)
O[b g r q d] = P * V
Z[b g r q] = sum[x](P)
W[b g r q] = max[x](P)
out O: f32
out Z: f32
out W: f32
"""


def test_probability_statistics_of_packed_gqa_rows(within_budget):
    """The fragment rows pack r x q (compiler/packing.py): each row's state is its own."""
    d = napkin.load(GQA)
    shape = {"b": 1, "g": 2, "r": 4, "q": 3, "x": 77}
    p = plan(d, "h100", shape)
    site = _site(p)
    assert site.packed and sorted(site.lse_kinds) == ["pmax", "psum"], site
    inputs = random_inputs(d, shape, 11)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)
