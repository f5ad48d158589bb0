"""Wrong results and crashes the sweep of the library over odd shapes and forced plans found
(helper branch sweep), each reduced to its smallest case, on the emulator against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin

# attention's gradient with the keys streamed (`--stream x=2`; the planner streams q): one
# kernel, three passes over x, the second accumulating O over x split over 4 lanes along d
# (d = 5: two trips, the second lane 0's only); D = sum[d](dO * O) is read by the third
# pass's dQ and dK at each key
ATTENTION = """axis b, h, q, x, d = 5
in Q[b h q d]: f32
in K[b h x d]: f32
in V[b h x d]: f32
S[b h q x] = Q * K / sqrt(size(d))
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
out O: f32
"""


def attention_backward(Q, K, V, dO):
    """dQ, dK, dV of softmax(Q K^T / sqrt(d)) V in float64."""
    Q, K, V, dO = (a.astype(np.float64) for a in (Q, K, V, dO))
    scale = 1 / math.sqrt(Q.shape[-1])
    S = np.einsum("bhqd,bhxd->bhqx", Q, K) * scale
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    O = np.einsum("bhqx,bhxd->bhqd", P, V)
    dP = np.einsum("bhqd,bhxd->bhqx", dO, V)
    dS = P * (dP - (dO * O).sum(-1, keepdims=True)) * scale
    return {"dQ": np.einsum("bhqx,bhxd->bhqd", dS, K), "dK": np.einsum("bhqx,bhqd->bhxd", dS, Q),
            "dV": np.einsum("bhqx,bhqd->bhxd", P, dO)}


def _streamed_keys():
    rng = np.random.default_rng(3)
    Q, dO = (rng.standard_normal((1, 2, 2, 5)).astype(np.float32) for _ in range(2))
    K, V = (rng.standard_normal((1, 2, 2, 5)).astype(np.float32) for _ in range(2))
    g = napkin.grad(ATTENTION)
    got = dict(zip((s.name for s in g.outputs),
                   napkin.run(g, Q, K, V, dO, backend="emulate", target="h100",
                              stream={"x": 2})))
    return got, attention_backward(Q, K, V, dO)


def test_attention_gradient_with_streamed_keys_reads_o_split_over_lanes():
    """dQ's accumulator update read D = sum[d](dO * O) computed inside its lanes' walk over
    d, each lane serially over every d of an O it holds only its share of (st4[k * 2 + d]
    past its register array): dQ off by up to 10. The update now computes what it reduces
    over the split axis before the lanes walk it (codegen/accum.update passes its operands
    to _loops as roots)."""
    got, want = _streamed_keys()
    for name in ("dQ", "dV"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_attention_gradient_with_streamed_keys_dk():
    """dK's store walks d over the lanes (uniform trips) and contracts q inside; D[q] =
    sum[d](dO * O) depends on q, so it is computed inside the walk: each lane ran it serially
    over every d of an O it holds only its share of (past its register array), dK off by up
    to 2.3. A reduction over the split axis nested in a uniform walk whose row does not
    depend on the lane's position now splits over the lanes and merges by shuffles, as
    outside (KernelLowering.pinned)."""
    got, want = _streamed_keys()
    np.testing.assert_allclose(got["dK"], want["dK"], rtol=1e-5, atol=1e-5)


def test_statistics_of_a_softmax_written_out():
    """napkin.statistics("attention_manual") raised KeyError: the saved row statistics are
    nodes of the gradient's canonical graph (the softmax written out is one node there),
    looked up in the diagram's own. Its logsumexp now feeds the saved gradient, which runs
    on the emulator against NumPy."""
    text = napkin.load("attention_manual").source.text.replace(": f16", ": f32")
    stats = napkin.statistics(napkin.load(text, d=5))
    rng = np.random.default_rng(1)
    Q, dO = (rng.standard_normal((1, 2, 3, 5)).astype(np.float32) for _ in range(2))
    K, V = (rng.standard_normal((1, 2, 7, 5)).astype(np.float32) for _ in range(2))
    O, lse = napkin.run(stats, Q, K, V)
    S = np.einsum("bhqd,bhxd->bhqx", Q.astype(np.float64), K.astype(np.float64)) / math.sqrt(5)
    np.testing.assert_allclose(lse, np.log(np.exp(S).sum(-1)), rtol=1e-5)
    g = napkin.grad(napkin.load(text, d=5), saved=True)
    got = napkin.run(g, Q, K, V, dO, lse, O, backend="emulate", target="h100")
    want = attention_backward(Q, K, V, dO)
    for s, out in zip(g.outputs, got):
        np.testing.assert_allclose(out, want[s.name], rtol=1e-4, atol=1e-5, err_msg=s.name)
