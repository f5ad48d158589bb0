"""Every example of docs/language.md (the contract) computes what the page says it does."""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import reference

FIRST_DIAGRAM = """\
# Scaled dot-product attention. FlashAttention is what napkin derives from it.
axis b, h, q, x          # batch, heads, queries, keys: sizes come from the inputs
axis d = 64              # head size, fixed when compiling (override: -D d=128)

in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16

S[b h q x] = Q * K / sqrt(size(d))    # d is in Q and K but not in S: contracted
P[b h q x] = softmax[x](S)            # normalised along x, woven over b h q
O[b h q d] = P * V                    # x is contracted

out O: f16
"""


def rnd(rng, *shape):
    """float64 arrays whose values f16 (and so f32) hold exactly: napkin.run converts them
    (an inexact conversion is refused, N0405)."""
    return rng.standard_normal(shape).astype(np.float16).astype(np.float64)


def ev(text, **arrays):
    d = napkin.load(text)
    return reference.evaluate(d, arrays)


def softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_first_diagram(rng):
    Q, K, V = rnd(rng, 1, 2, 5, 64), rnd(rng, 1, 2, 7, 64), rnd(rng, 1, 2, 7, 64)
    Q, K, V = (a.astype(np.float16).astype(np.float64) for a in (Q, K, V))
    out = ev(FIRST_DIAGRAM, Q=Q, K=K, V=V)["O"]
    s = Q @ K.transpose(0, 1, 3, 2) / 8.0
    np.testing.assert_allclose(out, softmax(s) @ V, rtol=1e-12)


def test_first_diagram_d_override(rng):
    d = napkin.load(FIRST_DIAGRAM, d=128)
    assert d.axes["d"] == 128
    Q, K, V = rnd(rng, 1, 1, 3, 128), rnd(rng, 1, 1, 4, 128), rnd(rng, 1, 1, 4, 128)
    Q, K, V = (a.astype(np.float16).astype(np.float64) for a in (Q, K, V))
    out = reference.evaluate(d, dict(Q=Q, K=K, V=V))["O"]
    s = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(128)
    np.testing.assert_allclose(out, softmax(s) @ V, rtol=1e-12)


def test_axis_declarations_static_and_dynamic():
    d = napkin.load("axis a, b = 64, c\nin X[a b c]: f32\nY[a b c] = X\nout Y: f32")
    assert d.axes == {"a": None, "b": 64, "c": None}


def test_several_inputs_and_outputs_on_one_line(rng):
    text = "axis a\nin X[a]: f32, Y[a]: f16\nS[a] = X + Y\nD[a] = X - Y\nout S: f32, D: f16"
    X, Y = rnd(rng, 5), rnd(rng, 5)
    out = napkin.run(text, X, Y)
    assert isinstance(out, tuple) and len(out) == 2
    y16 = Y.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(out[0], (X.astype(np.float32) + y16).astype(np.float32))
    assert out[1].dtype == np.float16


def test_schedule_hints_are_kept_on_the_ir():
    d = napkin.load(FIRST_DIAGRAM + "group q by 128\nstream x by 64 at smem\n")
    hints = {(h.kind, h.axis, h.size, h.level) for h in d.hints}
    assert hints == {("group", "q", 128, None), ("stream", "x", 64, "smem")}


def test_transpose_by_positional_renaming(rng):
    A = rnd(rng, 4, 4)
    out = ev("axis i, j\nin A[i j]: f32\nT[i j] = A[j i]\nout T: f32", A=A)["T"]
    np.testing.assert_array_equal(out, A.astype(np.float32).T)


def test_transpose_forces_equal_sizes(rng):
    with pytest.raises(NapkinError) as exc:
        napkin.run("axis i, j\nin A[i j]: f32\nT[i j] = A[j i]\nout T: f32", rnd(rng, 3, 4))
    assert exc.value.code == "N0308"


def test_diagonal(rng):
    A = rnd(rng, 5, 5)
    out = ev("axis i, j\nin A[i j]: f32\nD[i] = A[i i]\nout D: f32", A=A)["D"]
    np.testing.assert_array_equal(out, np.diag(A.astype(np.float32)))


def test_trace_needs_an_explicit_sum(rng):
    A = rnd(rng, 5, 5)
    out = ev("axis i, j\nin A[i j]: f32\nt[] = sum[i](A[i i])\nout t: f32", A=A)["t"]
    assert out.shape == () and np.isclose(out, np.trace(A.astype(np.float32)))
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis i, j\nin A[i j]: f32\nt[] = A[i i]\nout t: f32")
    assert exc.value.code == "N0301"


def test_renamed_axis_takes_the_size_of_its_position(rng):
    text = "axis s, e, t, u\nin Kp[s e]: f32\nin Z[t u]: f32\nY[t e] = Kp[t e] + Z[t u]\nout Y: f32"
    with pytest.raises(NapkinError) as exc:  # u vanishes under + : rejected, but sizes unify first
        napkin.load(text)
    assert exc.value.code == "N0301"
    text = "axis s, e, t\nin Kp[s e]: f32\nin Z[t]: f32\nY[t e] = Kp[t e] * Z\nout Y: f32"
    d = napkin.load(text)
    assert d.ir.graph["axes"]["t"].rep == d.ir.graph["axes"]["s"].rep
    with pytest.raises(NapkinError) as exc:
        napkin.run(d, rnd(rng, 3, 2), rnd(rng, 4))
    assert exc.value.code == "N0308"
    assert "axes `s` and `t`" in str(exc.value) and "3" in str(exc.value) and "4" in str(exc.value)


def test_two_sizes_for_one_axis_name_both_places():
    text = "axis d = 64, e = 32\nin K[d]: f16\nY[e] = K[e]\nout Y: f16"
    with pytest.raises(NapkinError) as exc:
        napkin.load(text)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0303"
    assert {lb.span.line for lb in diag.labels} == {1}
    assert len(diag.labels) == 2 and "64" in diag.message and "32" in diag.message


def test_broadcasting_by_name(rng):
    X, mu = rnd(rng, 3, 4), rnd(rng, 3)
    out = ev("axis r, c\nin X[r c]: f32, mu[r]: f32\nY[r c] = X[r c] - mu[r]\nout Y: f32",
             X=X, mu=mu)["Y"]
    x, m = (a.astype(np.float32).astype(np.float64) for a in (X, mu))
    np.testing.assert_array_equal(out, x - m[:, None])


def test_contraction_happens_before_division(rng):
    d = napkin.load(FIRST_DIAGRAM)
    contract = [n for n in d.ir if type(d.ir.nodes[n]["op"]).__name__ == "Contract"]
    assert len(contract) == 2
    s_eq = d.equations[0]
    assert s_eq.name == "S" and s_eq.contracted == ("d",)


def test_gelu_of_the_sum(rng):
    X, W1 = rnd(rng, 3, 5), rnd(rng, 5, 2)
    out = ev("axis t, m, f\nin X[t m]: f32, W1[m f]: f32\nH[t f] = gelu(X * W1)\nout H: f32",
             X=X, W1=W1)["H"]
    z = X.astype(np.float32).astype(np.float64) @ W1.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(out, 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3))),
                               rtol=1e-12)


@pytest.mark.parametrize("rhs, culprit", [
    ("X + W", "+"),             # vanishes under +
    ("exp(X)", "X"),            # from a single factor, under a function
    ("X", "X"),                 # from a single factor
    ("maximum(X, W)", "maximum"),
])
def test_vanishing_axis_is_rejected_asking_for_a_reduction(rhs, culprit):
    text = f"axis a, k\nin X[a k]: f32, W[a k]: f32\nY[a] = {rhs}\nout Y: f32"
    with pytest.raises(NapkinError) as exc:
        napkin.load(text)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0301"
    assert "sum[k]" in diag.help
    line = text.splitlines()[2]
    assert line[diag.span.col - 1:].startswith(culprit)


@pytest.mark.parametrize("fn, np_fn", [
    ("sum", lambda a, ax: a.sum(ax)), ("max", lambda a, ax: a.max(ax)),
    ("min", lambda a, ax: a.min(ax)), ("mean", lambda a, ax: a.mean(ax)),
    ("logsumexp", lambda a, ax: np.log(np.exp(a).sum(ax))),
])
def test_reductions_one_and_several_axes(fn, np_fn, rng):
    X = rnd(rng, 3, 4, 5)
    x32 = X.astype(np.float32).astype(np.float64)
    out = ev(f"axis a, x, y\nin X[a x y]: f32\nR[a] = {fn}[x y](X)\nout R: f32", X=X)["R"]
    np.testing.assert_allclose(out, np_fn(x32, (1, 2)), rtol=1e-12)
    out = ev(f"axis a, x, y\nin X[a x y]: f32\nR[a y] = {fn}[x](X)\nout R: f32", X=X)["R"]
    np.testing.assert_allclose(out, np_fn(x32, 1), rtol=1e-12)


def test_softmax_keeps_its_axis(rng):
    X = rnd(rng, 3, 6)
    out = ev("axis r, c\nin X[r c]: f32\nY[r c] = softmax[c](X)\nout Y: f32", X=X)["Y"]
    np.testing.assert_allclose(out, softmax(X.astype(np.float32).astype(np.float64)), rtol=1e-12)
    np.testing.assert_allclose(out.sum(-1), 1.0)


FUNCS = {
    "exp": np.exp, "exp2": np.exp2, "log": lambda x: np.log(np.abs(x) + 1),
    "log2": lambda x: np.log2(np.abs(x) + 1), "sqrt": lambda x: np.sqrt(np.abs(x)),
    "rsqrt": lambda x: 1 / np.sqrt(np.abs(x) + 1), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x / (1 + np.exp(-x)), "abs": np.abs,
}
ARGS = {"log": "abs(X) + 1", "log2": "abs(X) + 1", "sqrt": "abs(X)", "rsqrt": "abs(X) + 1"}


@pytest.mark.parametrize("fn", sorted(FUNCS))
def test_elementwise_functions(fn, rng):
    X = rnd(rng, 7) * 3
    arg = ARGS.get(fn, "X")
    out = ev(f"axis a\nin X[a]: f32\nY[a] = {fn}({arg})\nout Y: f32", X=X)["Y"]
    np.testing.assert_allclose(out, FUNCS[fn](X.astype(np.float32).astype(np.float64)), rtol=1e-12)


def test_operators_comparisons_and_logic(rng):
    X, W = rnd(rng, 9), rnd(rng, 9)
    x, w = (a.astype(np.float32).astype(np.float64) for a in (X, W))
    text = ("axis a\nin X[a]: f32, W[a]: f32\n"
            "Y[a] = where((X < W and not (X == W)) or X >= 1, maximum(X, W) - minimum(X, W) * -X / 2,"
            " X != W)\nout Y: f32")
    with pytest.raises(NapkinError) as exc:  # `X != W` is a boolean where a number is needed
        napkin.load(text)
    assert exc.value.code == "N0402"
    text = text.replace("X != W)", "where(X != W, 1, 0) + (X <= W) * 0)")
    with pytest.raises(NapkinError):
        napkin.load(text)  # a boolean times a number
    text = ("axis a\nin X[a]: f32, W[a]: f32\n"
            "Y[a] = where((X < W and not (X == W)) or X >= 1, maximum(X, W) - minimum(X, W) * -X / 2,"
            " where(X > W, 1, 0))\nout Y: f32")
    out = ev(text, X=X, W=W)["Y"]
    cond = ((x < w) & ~(x == w)) | (x >= 1)
    expected = np.where(cond, np.maximum(x, w) - np.minimum(x, w) * -x / 2, np.where(x > w, 1.0, 0.0))
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_scalars_numbers_inf_and_size(rng):
    X = rnd(rng, 4, 6)
    text = ("axis r, c\nin X[r c]: f32\nY[r c] = X * 1e-1 + .5 + size(c) + size(r) * 0.125 "
            "+ where(X > 100, inf, 0) + where(X > 100, -inf, 0)\nout Y: f32")
    out = ev(text, X=X)["Y"]
    x = X.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(out, x * 0.1 + 0.5 + 6 + 4 * 0.125, rtol=1e-12)


def test_causal_mask_from_axis_indices(rng):
    S = rnd(rng, 6, 6)
    out = ev("axis q, x\nin S[q x]: f32\nM[q x] = where(x <= q, S, -inf)\nout M: f32", S=S)["M"]
    s = S.astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(out, np.where(np.tril(np.ones((6, 6))) > 0, s, -np.inf))


def test_sliding_window_mask(rng):
    S = rnd(rng, 300, 290)
    out = ev("axis q, x\nin S[q x]: f32\nM[q x] = where(q - x < 256, S, -inf)\nout M: f32", S=S)["M"]
    qi, xi = np.arange(300)[:, None], np.arange(290)[None, :]
    np.testing.assert_array_equal(out, np.where(qi - xi < 256, S.astype(np.float32), -np.inf))


def test_fully_masked_softmax_rows_give_zero_and_logsumexp_minus_inf(rng):
    S = rnd(rng, 4, 5)
    text = ("axis q, x\nin S[q x]: f32\nM[q x] = where(q >= 2, S, -inf)\nP[q x] = softmax[x](M)\n"
            "L[q] = logsumexp[x](M)\nout P: f32, L: f32")
    out = ev(text, S=S)
    assert np.all(out["P"][:2] == 0) and not np.isnan(out["P"]).any()
    np.testing.assert_allclose(out["P"][2:].sum(-1), 1.0)
    assert np.all(out["L"][:2] == -np.inf) and np.all(np.isfinite(out["L"][2:]))


def test_zero_size_dynamic_axis(rng):
    text = "axis r, c\nin X[r c]: f32\nY[r c] = X * 2\nT[r] = sum[c](X)\nout Y: f32, T: f32"
    Y, T = napkin.run(text, np.zeros((3, 0)))
    assert Y.shape == (3, 0) and np.array_equal(T, np.zeros(3))
    Y, T = napkin.run(text, np.zeros((0, 4)))
    assert Y.shape == (0, 4) and T.shape == (0,)


def test_errors_point_at_the_diagram():
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis a\nin X[a]: f32\nY[a] = X * Z\nout Y: f32")
    diag = exc.value.diagnostics[0]
    assert (diag.code, diag.span.line, diag.span.col) == ("N0203", 3, 12)
    assert diag.help
