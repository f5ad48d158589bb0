"""Every library diagram, run by the reference executor, against an independent NumPy formula."""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin
from napkin.diagrams.sources import library_names
from napkin.runtime import reference


def f16(rng, *shape):
    """Random normal data, already rounded to f16, as float64."""
    return rng.standard_normal(shape).astype(np.float16).astype(np.float64)


def softmax(s, axis=-1):
    m = s.max(axis=axis, keepdims=True)
    e = np.exp(s - m)
    return e / e.sum(axis=axis, keepdims=True)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def silu(x):
    return x / (1 + np.exp(-x))


def attention(Q, K, V, causal=False):
    s = np.einsum("...qd,...xd->...qx", Q, K) / math.sqrt(Q.shape[-1])
    if causal:
        qi = np.arange(s.shape[-2])[:, None]
        xi = np.arange(s.shape[-1])[None, :]
        s = np.where(xi <= qi, s, -np.inf)
    return np.einsum("...qx,...xd->...qd", softmax(s), V)


def cases(rng):
    b, h, q, x, d = 2, 3, 37, 50, 64
    Q, K, V = f16(rng, b, h, q, d), f16(rng, b, h, x, d), f16(rng, b, h, x, d)
    A, B = f16(rng, 33, 65), f16(rng, 65, 17)
    X, W, bias = f16(rng, 31, 47), f16(rng, 47, 29), f16(rng, 29)
    gain = f16(rng, 47)
    R, gamma, beta = f16(rng, 7, 129), f16(rng, 129), f16(rng, 129)
    Qg, Kg, Vg = f16(rng, 2, 3, 4, 9, d), f16(rng, 2, 3, 13, d), f16(rng, 2, 3, 13, d)
    W1, W2 = f16(rng, 47, 63), f16(rng, 63, 5)
    Wg, Wu, Wd = f16(rng, 47, 63), f16(rng, 47, 63), f16(rng, 63, 5)
    Ab, Bb = f16(rng, 3, 9, 31), f16(rng, 3, 31, 11)
    mu = R.mean(-1, keepdims=True)
    var = ((R - mu) ** 2).mean(-1, keepdims=True)
    return {
        "matmul": (dict(A=A, B=B), A @ B),
        "batched_matmul": (dict(A=Ab, B=Bb), Ab @ Bb),
        "linear_gelu": (dict(X=X, W=W, bias=bias), gelu(X @ W + bias)),
        "softmax": (dict(X=R), softmax(R)),
        "layernorm": (dict(X=R, gamma=gamma, beta=beta), (R - mu) / np.sqrt(var + 1e-5) * gamma + beta),
        "rmsnorm": (dict(X=R, g=gamma), R / np.sqrt((R**2).mean(-1, keepdims=True) + 1e-6) * gamma),
        "rmsnorm_linear": (dict(X=X, g=gain, W=W),
                           (X / np.sqrt((X**2).mean(-1, keepdims=True) + 1e-6) * gain) @ W),
        "attention": (dict(Q=Q, K=K, V=V), attention(Q, K, V)),
        "attention_manual": (dict(Q=Q, K=K, V=V), attention(Q, K, V)),
        "causal_attention": (dict(Q=Q, K=K, V=V), attention(Q, K, V, causal=True)),
        "gqa_attention": (dict(Q=Qg, K=Kg, V=Vg), attention(Qg, Kg[:, :, None], Vg[:, :, None])),
        "mlp": (dict(X=X, W1=W1, W2=W2), gelu(X @ W1) @ W2),
        "swiglu": (dict(X=X, Wg=Wg, Wu=Wu, Wd=Wd), (silu(X @ Wg) * (X @ Wu)) @ Wd),
    }


# The library of language 1.0; those of 1.1 (integer labels, erf, masks from data) are checked
# against their own formulas on every backend in test_library_11.py.
VERSION_1 = ["matmul", "batched_matmul", "linear_gelu", "softmax", "layernorm", "rmsnorm",
             "attention", "attention_manual", "causal_attention", "gqa_attention", "mlp", "swiglu"]
FORMULAS = VERSION_1 + ["rmsnorm_linear"]


def test_library_is_the_twenty_two_of_the_language_page():
    assert library_names() == sorted(FORMULAS + [
        "cross_entropy", "gelu_erf", "softcap_attention", "alibi_attention",
        "sliding_window_attention", "varlen_attention", "embedding", "rope", "paged_attention"])


@pytest.mark.parametrize("name", FORMULAS)
def test_library_diagram_matches_numpy(name, rng):
    inputs, expected = cases(rng)[name]
    d = napkin.load(name)
    (out,) = reference.evaluate(d, inputs).values()
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", VERSION_1)
def test_run_returns_storage_dtype_rounded_reference(name, rng):
    inputs, expected = cases(rng)[name]
    (out,) = napkin.run(name, **inputs)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, expected.astype(np.float16))


@pytest.mark.parametrize("name", VERSION_1)
def test_lowp_mode_is_close_but_not_exact(name, rng):
    inputs, expected = cases(rng)[name]
    d = napkin.load(name)
    (low,) = reference.evaluate(d, inputs, precision="lowp").values()
    assert low.dtype == np.float16
    err = np.max(np.abs(low.astype(np.float64) - expected))
    scale = np.max(np.abs(expected))
    assert err <= 0.05 * max(scale, 1.0), (err, scale)
