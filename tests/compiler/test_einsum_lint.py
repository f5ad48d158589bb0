"""N0705: a product that keeps an axis both factors carry, then a softmax (or reduction) along
an axis only one factor has, in the same statement: `O[q d] = softmax[x](Q * K) * V` keeps `d`
(it is on the left), so it is one attention per `d`, not attention. Warned about with the
product's line and column; legitimate elementwise products (norms, gates, scales) are not."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import Source


def _warnings(text: str):
    return [w for w in napkin.load(Source("lint.napkin", text)).warnings if w.code == "N0705"]


TRAPS = {
    # the fuzzed case: attention written in one statement with d on the left
    "attention": ("axis q, x, d\nin Q[q d]: f32, K[x d]: f32, V[x d]: f32\n"
                  "O[q d] = softmax[x](Q * K * 0.125) * V\nout O: f32\n", ("d",), 3),
    # batched and multi-head, [b s h d] layout: h and d both kept
    "heads": ("axis b, q, x, h, d\nin Q[b q h d]: f32, K[b x h d]: f32\n"
              "P[b q x h d] = softmax[x](Q * K)\nout P: f32\n", ("h", "d"), 3),
    # a max (a logsumexp) over the keys, one per d
    "max": ("axis q, x, d\nin Q[q d]: f32, K[x d]: f32\nm[q d] = max[x](Q * K)\nout m: f32\n",
            ("d",), 3),
    "lse": ("axis q, x, d\nin Q[q d]: f32, K[x d]: f32\n"
            "m[q d] = logsumexp[x]((Q * K) * 2)\nout m: f32\n", ("d",), 3),
    # matmul layout of the second factor
    "transposed": ("axis q, x, d\nin Q[q d]: f32, Kt[d x]: f32\n"
                   "P[q x d] = softmax[x](Q * Kt)\nout P: f32\n", ("d",), 3),
}


@pytest.mark.parametrize("name", sorted(TRAPS))
def test_the_trap_is_warned_about_at_the_product(name):
    text, axes, line = TRAPS[name]
    src = text.splitlines()[line - 1]
    col = src.index(" * ", src.index("](")) + 2          # the product's `*`
    found = _warnings(text)
    assert len(found) == 1, found
    w = found[0]
    assert (w.span.line, w.span.col) == (line, col)
    for a in axes:
        assert f"`{a}`" in w.message
    assert "separately for each" in w.message and w.help and "sum[" in w.help
    assert w.severity == "warning"


LEGIT = {
    "attention": "axis b, h, q, x, d\nin Q[b h q d]: f16, K[b h x d]: f16, V[b h x d]: f16\n"
                 "S[b h q x] = Q * K / sqrt(size(d))\nP[b h q x] = softmax[x](S)\n"
                 "O[b h q d] = P * V\nout O: f16\n",
    "one_statement": "axis q, x, d\nin Q[q d]: f32, K[x d]: f32, V[x d]: f32\n"
                     "O[q d] = softmax[x](Q * K) * V\nout O: f32\n".replace("O[q d]", "O[q e]")
                     .replace("axis q, x, d", "axis q, x, d, e").replace("V[x d]", "V[x e]"),
    "explicit_sum": "axis q, x, d\nin Q[q d]: f32, K[x d]: f32, V[x d]: f32\n"
                    "O[q d] = softmax[x](sum[d](Q * K)) * V\nout O: f32\n",
    # the sum written out around per-head scores (QK-norm attention): `h` kept by design, and
    # the help said to sum it
    "explicit_sum_heads": "axis t, s, h, d\nin Q[t h d]: f32, K[s h d]: f32, V[s h d]: f32\n"
                          "O[t h d] = softmax[s](where(s <= t, sum[d](Q * K), -inf)) * V\n"
                          "out O: f32\n",
    "max_product_heads": "axis t, s, h, d\nin Q[t h d]: f32, K[s h d]: f32\n"
                         "P[t h s] = softmax[s](max[d](Q * K))\nout P: f32\n",
    "split_on_purpose": "axis q, x, d\nin Q[q d]: f32, K[x d]: f32\nS[q x d] = Q * K\n"
                        "P[q x d] = softmax[x](S)\nout P: f32\n",
    "heads_summing_d": "axis b, q, x, h, d\nin Q[b q h d]: f32, K[b x h d]: f32\n"
                       "P[b h q x] = softmax[x](Q * K)\nout P: f32\n",
    "rmsnorm": "axis r, c\nin X[r c]: f32, g[c]: f32\n"
               "Y[r c] = X * rsqrt(mean[c](X * X) + 1e-5) * g\nout Y: f32\n",
    "layernorm_var": "axis r, c\nin X[r c]: f32\nmu[r] = mean[c](X)\n"
                     "v[r] = mean[c]((X - mu) * (X - mu))\nout v: f32\n",
    "scaled_scores": "axis b, q, x\nin S[b q x]: f32, t[b]: f32\n"
                     "P[b q x] = softmax[x](S * t)\nout P: f32\n",
    "masked_scores": "axis q, x\nin S[q x]: f32, M[q x]: f32\nP[q x] = softmax[x](S * M)\nout P: f32\n",
    "gate": "axis t, f, m\nin X[t m]: f32, Wg[m f]: f32, Wu[m f]: f32\n"
            "H[t f] = silu(X * Wg) * sum[m](X * Wu)\nout H: f32\n",
    "batch_outer_product": "axis b, q, x\nin u[b q]: f32, w[b x]: f32\n"
                           "P[b q x] = softmax[x](u * w)\nout P: f32\n",
    "sum_of_products": "axis q, x, d\nin P[q x]: f32, V[x d]: f32\n"
                       "O[q d] = sum[x](P * V)\nout O: f32\n",
}


@pytest.mark.parametrize("name", sorted(LEGIT))
def test_legitimate_products_are_not_warned_about(name):
    assert _warnings(LEGIT[name]) == []


@pytest.mark.parametrize("name", ["attention", "causal_attention", "gqa_attention", "rmsnorm",
                                  "layernorm", "swiglu", "mlp", "softmax", "cross_entropy",
                                  "alibi_attention", "paged_attention", "softcap_attention"])
def test_no_library_diagram_is_warned_about(name):
    assert not [w for w in napkin.load(name).warnings if w.code == "N0705"]


def test_what_the_warning_says_is_what_the_diagram_computes(rng):
    """The trap computes one softmax per d (NumPy, float64), not attention."""
    text = TRAPS["attention"][0]
    q, x, d = 5, 7, 3
    Q, K, V = (rng.standard_normal(s).astype(np.float32) for s in ((q, d), (x, d), (x, d)))
    got = napkin.run(Source("lint.napkin", text), Q, K, V)[0]
    S = np.einsum("qd,xd->qxd", Q.astype(np.float64), K) * 0.125      # d kept
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    per_d = np.einsum("qxd,xd->qd", P, V)
    np.testing.assert_allclose(got, per_d, rtol=1e-5, atol=1e-6)
    A = np.einsum("qd,xd->qx", Q.astype(np.float64), K) * 0.125        # what was meant
    A = np.exp(A - A.max(axis=1, keepdims=True))
    assert not np.allclose(got, (A / A.sum(axis=1, keepdims=True)) @ V, atol=1e-3)


# An MLP written in one statement with the model axis on the left (`Y[b t m] = R + gelu(N2 *
# W1) * W2`): `m` is kept, so `N2 * W1` sums nothing and `f` is contracted once per `m` (a
# CUDA-core kernel of 15 b t m f FLOPs, not two linear layers on tensor cores)
MLP_TRAP = ("axis b, t, m, f\nin N2[b t m]: f32, R[b t m]: f32, W1[m f]: f32, W2[f m]: f32\n"
            "Y[b t m] = R + gelu(N2 * W1) * W2\nout Y: f32\n")
MLP_RENAMED = MLP_TRAP.replace("axis b, t, m, f", "axis b, t, m, f, m2").replace(
    "gelu(N2 * W1)", "gelu(N2[b t m2] * W1[m2 f])")


def test_a_kept_axis_under_a_contraction_is_warned_about_with_the_rename():
    (w,) = _warnings(MLP_TRAP)
    assert (w.span.line, w.span.col) == (3, MLP_TRAP.splitlines()[2].index(" * ") + 2)
    assert "`m`" in w.message and "`f` is contracted separately for each `m`" in w.message
    assert "N2[b t m2] * W1[m2 f]" in w.help and "axis m2" in w.help
    assert _warnings(MLP_RENAMED) == []
    two = ("axis b, t, m, f\nin N2[b t m]: f32, W1[m f]: f32, W2[f m]: f32\n"
           "H[b t f] = gelu(N2 * W1)\nY[b t m] = H * W2\nout Y: f32\n")
    assert _warnings(two) == []


def test_the_mlp_trap_computes_one_contraction_per_m_and_the_rename_the_mlp(rng):
    """float64 oracles: the trap is sum over f of gelu(N2[b t m] W1[m f]) W2[f m]; the renamed
    statement is the two-layer perceptron."""
    b, t, m, f = 2, 5, 3, 7
    N2, R = (rng.standard_normal((b, t, m)) for _ in range(2))
    W1, W2 = rng.standard_normal((m, f)) * 0.5, rng.standard_normal((f, m)) * 0.5
    gelu = lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    args = [a.astype(np.float32) for a in (N2, R, W1, W2)]
    trap = napkin.run(Source("lint.napkin", MLP_TRAP), *args)[0]
    per_m = R + np.einsum("btmf,fm->btm", gelu(N2[..., None] * W1), W2)
    np.testing.assert_allclose(trap, per_m, rtol=1e-4, atol=1e-5)
    mlp = napkin.run(Source("lint.napkin", MLP_RENAMED), *args)[0]
    np.testing.assert_allclose(mlp, R + gelu(N2 @ W1) @ W2, rtol=1e-4, atol=1e-5)
    assert not np.allclose(trap, mlp, atol=1e-2)
