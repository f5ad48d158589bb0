"""Intermediates whose rows napkin pads to 16 bytes (compiler/pitch.py), emulated: the kernels
that store them and the tensor-core products that copy them 16 bytes at a time (cp.async's
src-size at a row's end; the emulator checks each copy's alignment, and the launchers fill
the padding with NaN, which a read of it would carry into the outputs) against a float64
oracle at odd sizes: cross_entropy's gradient (dZ[t v], planned at v = 50257) at v = 61 and
at multiples of 8, attention reading padded queries and keys of an odd head size, and a
cotangent that CUDA-core kernels read too."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.model import array_name
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT, SIMT
from napkin.pipeline import run_plan

from .close import assert_close

CE = ("axis t, m, v\nin H[t m]: {dt}\nin W[v m]: {dt}\nin label[t]: i32\nZ[t v] = H * W\n"
      "L[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\nout L: f32\n")
BIG = {"t": 4096, "m": 4096, "v": 50257}
ATTENTION = """axis b, t, s, m, h
axis d = {d}
in X[b t m]: f16
in Wq[m h d]: f16, Wk[m h d]: f16
in V[b h s d]: f16
Q[b h t d] = X * Wq
K[b h t d] = X * Wk
S[b h t s] = Q * K[b h s d] / sqrt(size(d))
A[b t h d] = softmax[s](S) * V
out A: f16
"""


def _storage(dt: str):
    from napkin.runtime.dtypes import numpy_dtype
    return numpy_dtype(dt)


def _ce_oracle(H, W, label, dL):
    """dH and dW of sum_t dL[t] * L[t], in float64."""
    h, w = H.astype(np.float64), W.astype(np.float64)
    z = h @ w.T
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dz = dL.astype(np.float64)[:, None] * p
    dz[np.arange(len(label)), label] -= dL
    return dz @ w, dz.T @ h


@pytest.mark.parametrize("dt, t, m, v", [("f16", 37, 40, 61)] + [
    pytest.param(*c, marks=pytest.mark.thorough) for c in
    [("f16", 37, 40, 64), ("bf16", 19, 33, 130), ("f16", 2, 16, 1), ("bf16", 33, 24, 9)]])
def test_the_gradient_with_padded_rows_matches_a_float64_oracle(dt, t, m, v):
    rng = np.random.default_rng(t * 1000 + v)
    store = _storage(dt)
    H = (rng.standard_normal((t, m)) * 0.5).astype(np.float32).astype(store)
    W = (rng.standard_normal((v, m)) * 0.5).astype(np.float32).astype(store)
    label = rng.integers(0, v, t).astype(np.int32)
    label[0], label[-1] = 0, v - 1                          # the first and the last column
    dL = rng.standard_normal(t).astype(np.float32)
    p = plan(napkin.grad(napkin.load(CE.format(dt=dt))), "h100", BIG)
    assert {n for kp in p.kernels for n, _ in kp.model.pitches}     # (dZ: pitch.py)
    out = run_plan(p, {"H": H, "W": W, "label": label, "dL": dL}, {"t": t, "m": m, "v": v})
    dH, dW = _ce_oracle(H, W, label, dL)
    # dZ is rounded to 16 bits once (stored16.py), then read by the products
    assert_close(out["dH"], dH, dt, slack=8)
    assert_close(out["dW"], dW, dt, slack=8)


@pytest.mark.thorough
@pytest.mark.parametrize("d", [36, 37])
def test_attention_reading_padded_heads_matches_a_float64_oracle(d):
    """Q and K stored in f16 with rows of d rounded up to 8 values, FlashAttention's tiles
    (heads padded in shared memory too, headpad.py) copied 16 bytes at a time."""
    rng = np.random.default_rng(d)
    p = plan(napkin.load(ATTENTION.format(d=d)), "h100", {"b": 2, "t": 512, "s": 512,
                                                          "m": 256, "h": 4})
    assert {n for kp in p.kernels for n, _ in kp.model.pitches}
    b, t, m, h = 2, 37, 40, 3
    X = rng.standard_normal((b, t, m)).astype(np.float16)
    Wq, Wk = ((rng.standard_normal((m, h, d)) * m ** -0.5).astype(np.float16) for _ in range(2))
    V = rng.standard_normal((b, h, t, d)).astype(np.float16)
    out = run_plan(p, {"X": X, "Wq": Wq, "Wk": Wk, "V": V}, {"b": b, "t": t, "s": t, "m": m,
                                                              "h": h})
    x = X.astype(np.float64)
    q, k = (np.einsum("btm,mhd->bhtd", x, w.astype(np.float64)) for w in (Wq, Wk))
    S = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(d)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    assert_close(out["A"], np.einsum("bhts,bhsd->bthd", P, V.astype(np.float64)), "f16", slack=8)


@pytest.mark.thorough
def test_a_cotangent_read_on_the_cuda_cores_too_at_its_pitch(rng):
    """A residual block's dR[t m], stored in f16 for dWo = dR * A and read elementwise by the
    norm's gradient on the CUDA cores (stored16.py's cotangents), at m = 37: rows 40 values
    apart, which the CUDA-core kernels store and stage (peeled) at the pitch."""
    from .test_stored16_cotangents import _grad, _plan
    d = _grad()
    p = _plan(d)
    readers = [kp.schedule.engine for kp in p.kernels
               if any(array_name(p.graph, n) == "dR" for n, _ in kp.model.pitches)]
    assert SIMT in readers and PRODUCT in readers
    t, m, h = 37, 37, 3
    inputs = dict(X=rng.standard_normal((t, m)).astype(np.float16),
                  Wv=(rng.standard_normal((m, h, 16)) * m ** -0.5).astype(np.float16),
                  Wo=(rng.standard_normal((h, 16, m)) * (16 * h) ** -0.5).astype(np.float16),
                  g=(1 + 0.1 * rng.standard_normal(m)).astype(np.float16),
                  dY=rng.standard_normal((t, m)).astype(np.float16))
    out = run_plan(p, inputs, {"t": t, "m": m, "h": h, "(h*d)": h * 16})
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    for name in ("dWo", "dX", "dWv", "dg"):
        assert_close(out[name], want[name], "f16", slack=2.0)
