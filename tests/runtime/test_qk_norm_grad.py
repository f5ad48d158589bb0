"""The gradient of QK-norm attention (queries and keys RMS-normalised with a gain each before
the scores, as in OLMo-2 and Gemma-3) plans as FlashAttention-2's backward.

The backward's products `dKn = dS * Qn` (over t) and `dQn = dS * Kn` (over s) read the
normalised query and key that the scores read. canonical._hoisted took the gain `gq[d]`
(which lacks t) out of `dKn`'s sum, leaving `Q * rsqrt(t6 + eps)` computed as the operand:
not a load, so no chain of products took it, S was stored (797 us) and dS, dV computed on the
CUDA cores (3.88 ms): 6.15 ms in 11 kernels at t=s=4096, h=32 (model, h100). The scores'
operand now stays whole in every contraction reading it (`reach.read_by_scores`): 1.55 ms
in 9 kernels, Qn and Kn stored once by a small kernel each."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import ir
from napkin.compiler.canonical import canonicalize
from napkin.compiler.model import array_name
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION, CHAIN
from napkin.pipeline import run_plan

from .close import assert_close

QK_NORM = """axis t, s, h, d = 64
in Q[t h d]: f16
in K[s h d]: f16
in V[s h d]: f16
in gq[d]: f16, gk[d]: f16
Qn[t h d] = Q * rsqrt(mean[d](Q * Q) + 1e-6) * gq
Kn[s h d] = K * rsqrt(mean[d](K * K) + 1e-6) * gk
S[h t s] = Qn * Kn[s h d]
O[t h d] = softmax[s](where(s <= t, S, -inf) / sqrt(size(d))) * V
out O: f16
"""
EPS = 1e-6


def _normed(X, g):
    r = 1.0 / np.sqrt(np.mean(X * X, -1, keepdims=True) + EPS)
    return X * r, r


def _forward(Q, K, V, gq, gk):
    """O in float64, with what the backward needs ([t h d] layouts as the diagram's)."""
    Qh, rq = _normed(Q, None)
    Kh, rk = _normed(K, None)
    Qn, Kn = Qh * gq, Kh * gk
    t, s = Q.shape[0], K.shape[0]
    S = np.einsum("thd,shd->hts", Qn, Kn) / np.sqrt(Q.shape[-1])
    S = np.where(np.arange(s)[None, None, :] <= np.arange(t)[None, :, None], S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", P, V), (Qh, rq, Kh, rk, Qn, Kn, P)


def _oracle(Q, K, V, gq, gk, dO):
    """dQ, dK, dV, dgq, dgk in float64, written out (FlashAttention's backward, then the
    RMS norm's: dX = r * (dY - Xh * mean[d](dY * Xh)) with Xh = X * r)."""
    _, (Qh, rq, Kh, rk, Qn, Kn, P) = _forward(Q, K, V, gq, gk)
    dV = np.einsum("hts,thd->shd", P, dO)
    dP = np.einsum("thd,shd->hts", dO, V)
    dS = P * (dP - np.sum(dP * P, -1, keepdims=True)) / np.sqrt(Q.shape[-1])
    dQn = np.einsum("hts,shd->thd", dS, Kn)
    dKn = np.einsum("hts,thd->shd", dS, Qn)

    def norm_back(dY, Xh, r):
        return r * (dY - Xh * np.mean(dY * Xh, -1, keepdims=True))

    return dict(dQ=norm_back(dQn * gq, Qh, rq), dK=norm_back(dKn * gk, Kh, rk), dV=dV,
                dgq=np.einsum("thd,thd->d", dQn, Qh), dgk=np.einsum("shd,shd->d", dKn, Kh))


def _inputs(rng, t, s, h):
    return dict(Q=rng.standard_normal((t, h, 64)).astype(np.float16),
                K=rng.standard_normal((s, h, 64)).astype(np.float16),
                V=rng.standard_normal((s, h, 64)).astype(np.float16),
                gq=(1 + 0.3 * rng.standard_normal(64)).astype(np.float16),
                gk=(1 + 0.3 * rng.standard_normal(64)).astype(np.float16),
                dO=rng.standard_normal((t, h, 64)).astype(np.float16))


def test_the_oracle_is_the_gradient(rng):
    """The written-out oracle against central finite differences of the float64 forward, along
    random directions of every input (t=5 s=7 h=2: the mask leaves keys no query sees)."""
    x = {k: v.astype(np.float64) for k, v in _inputs(rng, 5, 7, 2).items()}
    dO = x.pop("dO")
    want = _oracle(*x.values(), dO)
    for name, grad in zip(x, ("dQ", "dK", "dV", "dgq", "dgk")):
        v = rng.standard_normal(x[name].shape)
        step = 1e-5
        plus = dict(x, **{name: x[name] + step * v})
        minus = dict(x, **{name: x[name] - step * v})
        fd = np.sum(dO * (_forward(*plus.values())[0] - _forward(*minus.values())[0])) / (2 * step)
        assert abs(fd - np.sum(want[grad] * v)) <= 1e-6 * max(1.0, abs(fd)), name


def test_the_backwards_products_read_the_normalised_query_and_key_the_scores_read():
    """canonical: dKn = dS * Qn and dQn = dS * Kn contract the very arrays the scores
    contract (their gains stay in them), so the chains load what the forward's kernel stores."""
    g = canonicalize(napkin.grad(napkin.load(QK_NORM)).ir)
    contractions = [n for n in ir.order(g) if isinstance(ir.op(g, n), ir.Contract)]
    named = {n: getattr(ir.op(g, n), "name", None) for n in g}
    scores = next(c for c in contractions
                  if {named[u] for u in ir.operands(g, c)} == {"Qn", "Kn"})
    by_dS = [c for c in contractions if "dS" in {named[u] for u in ir.operands(g, c)}]
    assert len(by_dS) == 2
    for c in by_dS:
        other = [u for u in ir.operands(g, c) if named[u] != "dS"]
        assert len(other) == 1 and other[0] in ir.operands(g, scores), \
            (ir.op(g, other[0]), named[other[0]])


@pytest.mark.thorough      # (about 17 CPU-s of planning at scale, then the emulator)
def test_qk_norm_backward_is_flashattentions_and_matches_float64(rng):
    d = napkin.grad(napkin.load(QK_NORM))
    p = plan(d, "h100", {"t": 4096, "s": 4096, "h": 32})
    stores = [[array_name(p.graph, n) for n in kp.kernel.stores] for kp in p.kernels]
    engines = [kp.schedule.engine for kp in p.kernels]
    # (dgq's reduction over [h t], 64 outputs, splits t in its own kernel alone, then dgk's
    # over [h s] splits s in its own: compiler/kernel_split.py; 11 kernels, where the unsplit
    # plan had 9 at 1.55 ms and the plan with dgq's split alone 10 at 1.23 ms)
    assert len(p.kernels) == 11, stores
    assert p.split is not None and [(s.axis, s.alone.arrays) for s in p.split.each()] == \
        [("t", ("dgq",)), ("s", ("dgk",))], p.split
    assert len(p.graph.graph["splits"]) == 2
    assert not any({"S", "dS", "t32"} & set(s) for s in stores), stores    # nothing N x N
    assert engines.count(ATTENTION) == 1 and engines.count(CHAIN) == 2, engines
    chains = [set(s) for s, e in zip(stores, engines) if e == CHAIN]
    assert {"dKn", "dV"} in chains and {"dQn"} in chains, chains
    assert p.time < 1.0e-3              # 6.15 ms before (model), 1.55 ms unsplit, 1.23 one split
    t, s, h = 37, 65, 2
    inputs = _inputs(rng, t, s, h)
    out = run_plan(p, inputs, {"t": t, "s": s, "h": h})
    want = _oracle(*(v.astype(np.float64) for v in inputs.values()))
    for name, value in want.items():    # Qn, Kn and dS rounded to f16 for the products
        assert_close(out[name], value, "f16", slack=2.0)   # (measured: 0.30-0.58)
