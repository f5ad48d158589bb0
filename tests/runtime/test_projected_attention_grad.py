"""The gradient of attention projected by the rest of the diagram (`R = A * Wo`, a
transformer block's): D = sum[d](dA * A) from A's computed cotangent and A copied with its
softmax online (compiler/gradstats.py), so the backward's forward pass is FlashAttention and
dQ, dK, dV are chains of products, where with the row term sum[s](dP * P) the recomputed
`A = P * V` and the dV product read the N x N probabilities from global memory on the CUDA
cores. Planned at scale (engines asserted, predicted faster than the old form), emulated at
odd small sizes against the float64 reference of the gradient."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION, CHAIN
from napkin.pipeline import run_plan

from .close import assert_close

TEXT = """axis b, t, s, m, h
axis d = 64
in Q[b h t d]: f16, K[b h s d]: f16, V[b h s d]: f16, Wo[h d m]: f16
S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)
A[b t h d] = softmax[s](S) * V
R[b t m] = A * Wo
out R: f16
"""
BIG = {"b": 1, "t": 2048, "s": 2048, "m": 1024, "h": 8}


def _engines(p) -> dict:
    eqs = p.graph.graph["equations"]
    return {e.name: kp.schedule.engine for kp in p.kernels for e in eqs
            if e.stmt in kp.kernel.equations and e.stmt not in kp.kernel.recomputed}


@pytest.mark.thorough       # (15 CPU-s of planning at scale, 10 for the old form)
def test_projected_attentions_backward_is_flashattentions_and_matches_float64(rng):
    d = napkin.grad(napkin.load(TEXT))
    p = plan(d, "h100", BIG)
    engines = _engines(p)
    assert engines["A"] == ATTENTION, engines
    assert {engines[n] for n in ("dQ", "dK", "dV")} == {CHAIN}, engines
    text = d.source.text                    # the old form: the row term over s, A from P
    old = text.replace("A[b t h d] = softmax[s](S) * V", "A[b t h d] = t15 * V") \
        .replace("D[b h t] = sum[d](dA * A)\n", "").replace("(g15 - D)", "(g15 - sum[s](g15 * t15))")
    assert old != text and "D[" not in old
    before = plan(napkin.load(old), "h100", BIG)    # (model, h100: 0.36 -> 0.10 ms)
    assert sum(k.cost.time for k in p.kernels) < 0.5 * sum(k.cost.time for k in before.kernels)
    b, t, m, h = 1, 37, 40, 3
    inputs = dict(**{n: rng.standard_normal((b, h, t, 64)).astype(np.float16) for n in "QKV"},
                  Wo=(rng.standard_normal((h, 64, m)) * (64 * h) ** -0.5).astype(np.float16),
                  dR=rng.standard_normal((b, t, m)).astype(np.float16))
    out = run_plan(p, inputs, dict(b=b, t=t, s=t, m=m, h=h))
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    for name in ("dQ", "dK", "dV", "dWo"):
        assert_close(out[name], want[name], "f16", slack=3.0)
