"""The derived backward diagrams against central finite differences of the float64 reference
and against independent NumPy formulas (FlashAttention's backward, layernorm's, softmax's)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError
from napkin.diagrams.sources import library_names
from napkin.runtime.reference import evaluate

# odd sizes for every axis, static ones overridden too
SIZES = {"b": 2, "h": 3, "g": 2, "r": 3, "q": 5, "x": 7, "d": 5, "m": 5, "n": 3, "k": 6, "t": 4,
         "i": 5, "o": 3, "f": 6, "c": 7, "v": 6, "w": 3, "p": 2, "s": 3, "e": 6, "P": 2, "j": 4}


def _random_inputs(d, rng, sizes):
    """Normal floats; integers (labels, document ids) in 0..2, which no gradient reaches."""
    return {s.name: rng.integers(0, 3, [sizes[a] for a in s.axes]).astype(np.int32)
            if s.dtype in ("i32", "i64") else rng.standard_normal([sizes[a] for a in s.axes])
            for s in d.inputs}


def _sized(name):
    d = napkin.load(name)
    static = {a: SIZES[a] for a, size in d.axes.items() if size is not None}
    reps = d.ir.graph["axes"]      # axes the diagram makes equal take one size
    return napkin.load(name, **static), {a: SIZES[reps[a].rep] for a in d.axes}


def _loss(d, inputs, cot):
    out = evaluate(d, inputs, exact=True)
    return sum(float(np.sum(out[name] * cot[f"d{name}"])) for name in out)


def _check_against_finite_differences(d, grad, inputs, cot, rng, eps=1e-6):
    got = evaluate(grad, {**inputs, **cot}, exact=True)
    # a gradient for every floating-point input (integer labels, ids and indices have none)
    assert set(got) == {f"d{s.name}" for s in d.inputs if s.dtype in ("f32", "f16", "bf16")}
    for name, g in got.items():
        x = inputs[name[1:]]
        v = rng.standard_normal(x.shape)
        plus = _loss(d, {**inputs, name[1:]: x + eps * v}, cot)
        minus = _loss(d, {**inputs, name[1:]: x - eps * v}, cot)
        fd = (plus - minus) / (2 * eps)
        exact = float(np.sum(g * v))
        assert abs(fd - exact) <= 1e-6 * max(1.0, abs(fd)), (name, fd, exact)


def _repeated(grad) -> list[str]:
    """Equations of a gradient's text whose axes and right-hand side an earlier one has: a
    value computed twice under two names (the adjoint dS / sqrt(size(d)) once for dQ and again
    for dK; a gather the forward writes in two statements)."""
    seen, repeated = set(), []
    for line in grad.source.text.splitlines():
        lhs, eq, rhs = line.partition(" = ")
        if eq and "[" in lhs and not line.startswith(("#", "axis ")):
            key = (lhs[lhs.index("["):], rhs)
            repeated += [line] if key in seen else []
            seen.add(key)
    return repeated


@pytest.mark.parametrize("name", library_names())
def test_library_gradients_match_finite_differences(name):
    rng = np.random.default_rng(zlib.crc32(name.encode()))   # the same in every process
    d, sizes = _sized(name)
    grad = napkin.grad(d)
    assert not grad.warnings, grad.warnings
    assert not _repeated(grad), _repeated(grad)
    inputs = _random_inputs(d, rng, sizes)
    cot = {f"d{s.name}": rng.standard_normal([sizes[a] for a in s.axes]) for s in d.outputs}
    _check_against_finite_differences(d, grad, inputs, cot, rng)


def _attention_reference(Q, K, V, dO, causal):
    """FlashAttention-2's backward written out in NumPy (Dao 2023, Algorithm 2)."""
    d = Q.shape[-1]
    S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(d)
    if causal:
        S = np.where(np.arange(K.shape[-2])[None, :] <= np.arange(Q.shape[-2])[:, None], S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    O = P @ V
    dV = np.swapaxes(P, -1, -2) @ dO
    dP = dO @ np.swapaxes(V, -1, -2)
    D = np.sum(dO * O, -1, keepdims=True)
    dS = P * (dP - D)
    dQ = dS @ K / np.sqrt(d)
    dK = np.swapaxes(dS, -1, -2) @ Q / np.sqrt(d)
    return O, dQ, dK, dV, np.log(np.exp(S - S.max(-1, keepdims=True)).sum(-1)) + S.max(-1)


@pytest.mark.parametrize("name,causal", [("attention", False), ("causal_attention", True)])
@pytest.mark.parametrize("saved", [False, True])
def test_attention_gradient_is_flashattentions(name, causal, saved):
    rng = np.random.default_rng(7)
    Q, K, V = (rng.standard_normal((2, 3, n, 5)) for n in (9, 11, 11))
    dO = rng.standard_normal((2, 3, 9, 5))
    O, dQ, dK, dV, lse = _attention_reference(Q, K, V, dO, causal)
    inputs = {"Q": Q, "K": K, "V": V, "dO": dO}
    grad = napkin.grad(name, saved=saved, d=5)
    if saved:
        stats = evaluate(napkin.statistics(name, d=5), {"Q": Q, "K": K, "V": V}, exact=True)
        np.testing.assert_allclose(stats["P_lse"], lse, rtol=1e-12)
        inputs |= {"P_lse": stats["P_lse"], "O_saved": stats["O"]}
        assert "softmax" not in grad.source.text     # P recomputed from the saved logsumexp
    got = evaluate(grad, inputs, exact=True)
    for key, want in (("dQ", dQ), ("dK", dK), ("dV", dV)):
        np.testing.assert_allclose(got[key], want, rtol=1e-10, atol=1e-12)


def test_gqa_gradient_sums_over_the_query_heads_of_a_group():
    rng = np.random.default_rng(3)
    Q = rng.standard_normal((1, 2, 3, 4, 5))
    K, V = rng.standard_normal((2, 1, 2, 6, 5))
    dO = rng.standard_normal(Q.shape)
    _, dQ, dK, dV, _ = _attention_reference(Q, K[:, :, None], V[:, :, None], dO, False)
    got = evaluate(napkin.grad("gqa_attention", d=5), {"Q": Q, "K": K, "V": V, "dO": dO}, exact=True)
    np.testing.assert_allclose(got["dQ"], dQ, rtol=1e-10)
    np.testing.assert_allclose(got["dK"], dK.sum(2), rtol=1e-10)
    np.testing.assert_allclose(got["dV"], dV.sum(2), rtol=1e-10)


def test_layernorm_and_softmax_gradients_are_the_textbook_formulas():
    rng = np.random.default_rng(11)
    X, dY = rng.standard_normal((2, 5, 13))
    gamma, beta = rng.standard_normal((2, 13))
    mu = X.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((X - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (X - mu) * rstd
    dxhat = dY * gamma
    dX = rstd * (dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    got = evaluate(napkin.grad("layernorm"), {"X": X, "gamma": gamma, "beta": beta, "dY": dY}, exact=True)
    np.testing.assert_allclose(got["dX"], dX, rtol=1e-9)
    np.testing.assert_allclose(got["dgamma"], (dY * xhat).sum(0), rtol=1e-10)
    np.testing.assert_allclose(got["dbeta"], dY.sum(0), rtol=1e-12)
    Y = np.exp(X - X.max(-1, keepdims=True))
    Y /= Y.sum(-1, keepdims=True)
    got = evaluate(napkin.grad("softmax"), {"X": X, "dY": dY}, exact=True)
    np.testing.assert_allclose(got["dX"], Y * (dY - (dY * Y).sum(-1, keepdims=True)), rtol=1e-10)


def test_rmsnorm_mlp_and_swiglu_gradients_are_the_textbook_formulas():
    """Written out by hand in NumPy, not derived from the diagram: RMSNorm's
    dX = r dY g - X r^3 mean(dY g X) with r = rsqrt(mean(X^2) + eps); the MLP's and SwiGLU's
    chain rule through each product (the language's gelu is the tanh form; silu = x
    sigmoid(x), whose derivative is sigmoid(x) (1 + x (1 - sigmoid(x))))."""
    rng = np.random.default_rng(13)
    X, dY = rng.standard_normal((2, 5, 13))
    g = rng.standard_normal(13)
    r = 1 / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6)
    dxhat = dY * g                                      # Y = (X r) g
    dX = r * dxhat - X * r ** 3 * (dxhat * X).mean(-1, keepdims=True)
    got = evaluate(napkin.grad("rmsnorm"), {"X": X, "g": g, "dY": dY}, exact=True)
    np.testing.assert_allclose(got["dX"], dX, rtol=1e-9)
    np.testing.assert_allclose(got["dg"], (dY * X * r).sum(0), rtol=1e-10)

    t, m, f, o = 5, 7, 6, 3
    X = rng.standard_normal((t, m))
    W1, Wg, Wu = (rng.standard_normal((m, f)) for _ in range(3))
    W2 = rng.standard_normal((f, o))
    dY = rng.standard_normal((t, o))
    c = np.sqrt(2 / np.pi)
    A = X @ W1
    th = np.tanh(c * (A + 0.044715 * A ** 3))
    H = 0.5 * A * (1 + th)
    dH = dY @ W2.T
    dA = dH * (0.5 * (1 + th) + 0.5 * A * (1 - th ** 2) * c * (1 + 3 * 0.044715 * A ** 2))
    got = evaluate(napkin.grad("mlp"), {"X": X, "W1": W1, "W2": W2, "dY": dY}, exact=True)
    np.testing.assert_allclose(got["dW2"], H.T @ dY, rtol=1e-10)
    np.testing.assert_allclose(got["dW1"], X.T @ dA, rtol=1e-9)
    np.testing.assert_allclose(got["dX"], dA @ W1.T, rtol=1e-9)

    G, U = X @ Wg, X @ Wu
    sig = 1 / (1 + np.exp(-G))
    H = G * sig * U
    dH = dY @ W2.T
    dG = dH * U * sig * (1 + G * (1 - sig))
    dU = dH * G * sig
    got = evaluate(napkin.grad("swiglu"), {"X": X, "Wg": Wg, "Wu": Wu, "Wd": W2, "dY": dY},
                   exact=True)
    np.testing.assert_allclose(got["dWd"], H.T @ dY, rtol=1e-10)
    np.testing.assert_allclose(got["dWg"], X.T @ dG, rtol=1e-9)
    np.testing.assert_allclose(got["dWu"], X.T @ dU, rtol=1e-9)
    np.testing.assert_allclose(got["dX"], dG @ Wg.T + dU @ Wu.T, rtol=1e-9)


MASKED_LOG = """
axis r, c
in X[r c]: f32
in M[r c]: f32
Y[r c] = where(M > 0, log(X) * X, 0)
Z[r] = sum[c](where(c < 3, X, 0) * M)
out Y, Z: f32
"""


def test_nan_under_a_mask_never_reaches_a_gradient():
    rng = np.random.default_rng(5)
    M = rng.standard_normal((4, 6))
    X = np.where(M > 0, rng.uniform(0.5, 2, (4, 6)), 0.0)     # log(0) * 0 = NaN where masked
    X[:, 4] = np.where(M[:, 4] > 0, X[:, 4], np.nan)          # NaN where both branches mask it
    dY, dZ = rng.standard_normal((4, 6)), rng.standard_normal(4)
    got = evaluate(napkin.grad(MASKED_LOG, wrt="X"), {"X": X, "M": M, "dY": dY, "dZ": dZ}, exact=True)["dX"]
    want = np.where(M > 0, dY * (np.log(np.where(M > 0, X, 1)) + 1), 0) + \
        np.where(np.arange(6) < 3, dZ[:, None] * M, 0)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_gradient_is_a_diagram_that_checks_and_names_its_arrays():
    g = napkin.grad("attention")
    assert [s.name for s in g.inputs] == ["Q", "K", "V", "dO"]
    assert [(s.name, s.dtype) for s in g.outputs] == [("dQ", "f16"), ("dK", "f16"), ("dV", "f16")]
    again = napkin.load(g.source.text)       # the printed text is an ordinary diagram
    assert [s.name for s in again.outputs] == ["dQ", "dK", "dV"]
    assert [s.name for s in napkin.grad("attention", wrt=["K"]).outputs] == ["dK"]


@pytest.mark.parametrize("wrt,message", [
    ("Z", "`Z` is not an input"),
    ("M", "no output of"),
])
def test_wrong_wrt_is_a_clear_error(wrt, message):
    text = "axis r\nin X[r]: f32\nin M[r]: f32\nY[r] = exp(X)\nout Y: f32\n"
    with pytest.raises(NapkinError) as e:
        napkin.grad(text, wrt=wrt)
    assert e.value.diagnostics[0].code == "N0810" and message in str(e.value)


def test_napkin_grad_command_prints_writes_and_checks(tmp_path, capsys, monkeypatch):
    from napkin.cli import main
    monkeypatch.chdir(tmp_path)
    assert main(["grad", "attention", "--wrt", "Q,K"]) == 0
    printed = capsys.readouterr().out
    assert "out dQ: f16, dK: f16\n" in printed and "dV" not in printed
    assert main(["grad", "attention", "--saved", "-o", "back.napkin"]) == 0
    text = (tmp_path / "back.napkin").read_text()
    assert "in P_lse[b h q]: f32" in text and "softmax" not in text
    assert main(["check", "back.napkin"]) == 0         # an ordinary diagram on disk
    assert main(["grad", "softmax", "--wrt", "Z"]) == 1
    assert "N0810" in capsys.readouterr().err
    assert not (tmp_path / "Z").exists()


@pytest.mark.parametrize("saved", [False, True])
def test_attention_gradient_kernels_run_on_the_emulator(saved):
    # the backward compiled like any diagram: CUDA emitted, run by the CPU emulator, against
    # FlashAttention-2's formulas in float64 (odd sizes: 13 queries, 21 keys, d = 16)
    rng = np.random.default_rng(2)
    Q, K, V = (rng.standard_normal((1, 2, n, 16)).astype(np.float16) for n in (13, 21, 21))
    dO = rng.standard_normal((1, 2, 13, 16)).astype(np.float16)
    O, dQ, dK, dV, lse = _attention_reference(*(a.astype(np.float64) for a in (Q, K, V, dO)), False)
    args = [Q, K, V, dO] + ([lse.astype(np.float32), O.astype(np.float16)] if saved else [])
    got = napkin.run(napkin.grad("attention", saved=saved, d=16), *args, backend="emulate")
    for g, want in zip(got, (dQ, dK, dV)):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float64), want, atol=2e-2 * np.abs(want).max(), rtol=0)


def test_compile_save_for_backward_adds_the_row_logsumexp():
    rng = np.random.default_rng(4)
    Q, K, V = (rng.standard_normal((1, 2, n, 8)).astype(np.float16) for n in (11, 19, 19))
    O, P_lse = napkin.compile("causal_attention", backend="interpret", save_for_backward=True, d=8)(Q, K, V)
    want_O, _, _, _, lse = _attention_reference(*(a.astype(np.float64) for a in (Q, K, V, Q)), True)
    assert P_lse.dtype == np.float32 and P_lse.shape == (1, 2, 11)
    np.testing.assert_allclose(P_lse, lse, rtol=1e-5)
    np.testing.assert_allclose(O.astype(np.float64), want_O, atol=5e-3)


def test_gradients_of_the_functions_of_language_11():
    """erf, log1p, expm1, sin, cos, pow (both operands), mod and float(...) against finite
    differences; integer inputs and positions get no gradient."""
    text = ("axis a, b\nin X[a b]: f32, Y[a b]: f32\nin k[a]: i32\n"
            "Z[a b] = erf(X) * sin(Y) + cos(X * Y) + log1p(X * X) + expm1(Y / 3)"
            " + pow(1.5 + X * X, Y) + mod(X, 1.5 + Y * Y) * float(k) + floor(X) + X ** 2\n"
            "out Z: f32")
    d = napkin.load(text)
    grad = napkin.grad(d)
    assert {s.name for s in grad.outputs} == {"dX", "dY"}
    rng = np.random.default_rng(7)
    inputs = {"X": rng.standard_normal((3, 4)), "Y": rng.standard_normal((3, 4)),
              "k": np.array([1, -2, 3], np.int32)}
    _check_against_finite_differences(d, grad, inputs, {"dZ": rng.standard_normal((3, 4))}, rng)


# reads at computed positions and scans, each against finite differences: a reversal, a
# halving (two positions read the same element), a gather along another axis's position
# (a fresh name for the summed axis), a diagonal through an index, a page table read through
# a nested gather, an intermediate read twice, cumsum along the first and the last axis,
# cumsum of a broadcast cotangent, and cumprod with zeros (where dY * Y / X is no gradient)
SCANS_AND_GATHERS = {
    "reversal": ("axis a, b\nin X[a b]: f32\nZ[a b] = X[a (size(b) - 1 - b)] * X\nout Z: f32", {}),
    "halving": ("axis a, b\nin X[a b]: f32\nZ[a b] = X[a (b // 2)]\nout Z: f32", {}),
    "transposed": ("axis a, b\nin X[a b]: f32\nin I[a]: i32\nZ[b a] = X[b I[a]]\nout Z: f32", {"a": 4, "b": 4}),
    "diagonal": ("axis a, b\nin X[a b]: f32\nin I[a]: i32\nZ[a] = X[a I[a]]\nout Z: f32", {}),
    "pages": ("axis b, x, n, p, d\naxis P = 2\nin Kc[n p d]: f32\nin pages[b p]: i32\n"
              "Z[b x d] = Kc[pages[b (x // size(P))] mod(x, size(P)) d] ** 2\nout Z: f32",
              {"b": 2, "x": 5, "n": 7, "p": 3, "d": 2}),
    "twice": ("axis t, v, m\nin E[v m]: f32\nin tok[t]: i32\nY[v m] = tanh(E)\n"
              "Z[t m] = Y[tok[t] m] * Y[tok[t] (size(m) - 1 - m)]\nout Z: f32", {"t": 7, "v": 4, "m": 3}),
    "rotation": ("axis a, b\nin X[a b]: f32\nZ[a b] = X[a mod(b + 2, size(b))] * X\nout Z: f32", {}),
    "rotation_by_row": ("axis a, b\nin X[a b]: f32\nZ[a b] = X[a mod(b - a, size(b))] ** 2\nout Z: f32", {}),
    "rotation_half": ("axis a, b\nin X[a b]: f32\nZ[b a] = X[a mod(size(b) // 2 + b, size(b))]\nout Z: f32", {}),
    "rotation_broadcast": ("axis a, b\naxis c = 2\nin X[a b]: f32\nZ[a b c] = X[a mod(b + 1, size(b))]\nout Z: f32", {"c": 2}),
    "rotation_longer": ("axis a, b\naxis c = 7\nin X[a b]: f32\nZ[a c] = X[a mod(c + 1, size(b))]\nout Z: f32", {"c": 7}),
    "cumsum": ("axis a, b\nin X[a b]: f32\nZ[a b] = cumsum[b](X) * X\nout Z: f32", {}),
    "cumsum_first": ("axis a, b\nin X[a b]: f32\nZ[b a] = cumsum[a](exp(X))\nout Z: f32", {}),
    "cumsum_summed": ("axis a, b\nin X[a b]: f32\nZ[b] = sum[a](cumsum[a](X))\nout Z: f32", {}),
    "cumprod": ("axis a, b\nin X[a b]: f32\nZ[a b] = cumprod[b](X)\nout Z: f32", {}),
}


@pytest.mark.parametrize("name", SCANS_AND_GATHERS)
def test_gradients_through_gathers_and_scans_match_finite_differences(name):
    text, sizes = SCANS_AND_GATHERS[name]
    sizes = {"a": 3, "b": 5, **sizes}
    d = napkin.load(text, **({"x": sizes["x"]} if "x" in sizes else {}))
    grad = napkin.grad(d)
    rng = np.random.default_rng(11)
    high = {"I": sizes["b"], "pages": sizes.get("n"), "tok": sizes.get("v")}
    inputs = {s.name: rng.integers(0, high[s.name], [sizes[a] for a in s.axes]).astype(np.int32)
              if s.dtype == "i32" else rng.standard_normal([sizes[a] for a in s.axes]) for s in d.inputs}
    if name == "cumprod":
        inputs["X"][1, 2] = inputs["X"][2, 1] = inputs["X"][2, 3] = 0.0
    if "tok" in inputs:
        inputs["tok"][:3] = 1          # a row read three times: its gradient sums them
    cot = {f"d{s.name}": rng.standard_normal([sizes[a] for a in s.axes]) for s in d.outputs}
    _check_against_finite_differences(d, grad, inputs, cot, rng)


@pytest.mark.parametrize("name,read", [
    ("rotation", "mod(b - (2), size(b))"), ("rotation_by_row", "mod(b + (a), size(b))"),
    ("rotation_half", "mod(b - (size(b) // 2), size(b))"),
    ("rotation_broadcast", "mod(b - (1), size(b))"), ("rotation_longer", None)])
def test_the_gradient_of_a_rotation_is_the_inverse_rotation(name, read):
    """A read at `mod(r + c, size(a))` with `r` as large as `a` and `c` over kept axes is a
    permutation: its cotangent is read at the inverse one, no masked sum over `r` (rope's
    rotate-half: size(e) times less work); a broadcast result's cotangent is summed first.
    Along a longer axis it is no permutation and stays the masked sum (values: the
    finite-difference test above)."""
    text, _ = SCANS_AND_GATHERS[name]
    body = napkin.grad(napkin.load(text)).source.text
    dX = next(line for line in body.splitlines() if line.startswith("dX["))
    if read is None:
        assert "sum[" in dX and "where(" in dX, dX
    else:
        assert read in dX and "sum[" not in dX and "where(" not in dX, dX


def _rope_gradient_numpy(X, C, S, dR):
    """R = X C + rotate_half(X) S by hand: rotate_half(X)[j] = -X[j + e/2] below e/2, X[j - e/2]
    above, so dX is dR C plus (sign dR S) rolled back by e/2."""
    half = X.shape[-1] // 2
    sign = np.where(np.arange(X.shape[-1]) < half, -1.0, 1.0)
    dX = dR * C[:, None] + np.roll(sign * dR * S[:, None], half, axis=-1)
    rotated = np.concatenate([-X[..., half:], X[..., :half]], -1)
    return dX, (dR * X).sum(1), (dR * rotated).sum(1)


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_embedding_and_rope_gradients_on_every_backend(backend):
    """The embedding's gradient is a scatter-add (np.add.at, repeated tokens included), rope's
    a roll by half the head; both through the emitted CUDA too, odd t and v."""
    rng = np.random.default_rng(5)
    t, v, m, h, e = 37, 11, 24, 3, 16
    E = rng.standard_normal((v, m)).astype(np.float16)
    tok = rng.integers(0, v, t).astype(np.int32)
    tok[:4] = 3
    dX = rng.standard_normal((t, m)).astype(np.float16)
    want = np.zeros((v, m))
    np.add.at(want, tok, dX.astype(np.float64))
    (dE,) = napkin.run(napkin.grad("embedding"), E, tok, dX, backend=backend)
    assert dE.dtype == np.float16
    np.testing.assert_allclose(dE.astype(np.float64), want, atol=1e-2, rtol=1e-3)
    X, dR = (rng.standard_normal((t, h, e)).astype(np.float16) for _ in range(2))
    angles = rng.uniform(0, 6, (t, e))
    C, S = np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)
    got = napkin.run(napkin.grad("rope"), X, C, S, dR, backend=backend)
    for g, w in zip(got, _rope_gradient_numpy(*(a.astype(np.float64) for a in (X, C, S, dR)))):
        np.testing.assert_allclose(g.astype(np.float64), w, atol=1e-2, rtol=1e-3)


def test_saved_sources_name_what_the_statistics_diagram_gives():
    from napkin.compiler.statistics import saved_sources
    d = napkin.load("attention")
    assert saved_sources(d) == (("P_lse", "P_lse"), ("O_saved", "O"))
    outs = [s.name for s in napkin.statistics("attention").outputs]
    assert outs == ["O", "P_lse"]
    assert saved_sources(napkin.load("layernorm")) == ()     # no softmax: nothing saved


WEIGHTED_BY_A_SOFTMAX = """\
axis i = 5, j = 3
in X[i j]: f32
Y[j] = (X + X) * softmax[i](X)
out Y: f32
"""


@pytest.mark.parametrize("saved", [False, True])
def test_a_softmax_contracted_into_an_output_of_only_its_rows(saved):
    """The contraction `(X + X) * softmax[i](X)` keeps no axis beside the softmax's rows, so
    FlashAttention's row term is a product, not a sum over no axis (it was `sum[](dY * Y)`,
    N0208, found by tests/fuzz/test_random_gradients.py)."""
    rng = np.random.default_rng(5)
    d = napkin.load(WEIGHTED_BY_A_SOFTMAX)
    grad = napkin.grad(d, saved=saved)
    assert "D[j] = dY * " in grad.source.text
    X = rng.standard_normal((5, 3))
    cot = {"dY": rng.standard_normal(3)}
    if not saved:
        _check_against_finite_differences(d, grad, {"X": X}, cot, rng)
        return
    from napkin.compiler.statistics import saved_sources
    stats = evaluate(napkin.statistics(d), {"X": X}, exact=True)
    extra = {name: stats[source] for name, source in saved_sources(d)}
    assert sorted(extra) == ["Y_saved", "t2_lse"]
    got = evaluate(grad, {"X": X, **cot, **extra}, exact=True)
    plain = evaluate(napkin.grad(d), {"X": X, **cot}, exact=True)
    np.testing.assert_allclose(got["dX"], plain["dX"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("text", [
    # the cotangent of X0 + X0[j] is repeated along i (the operand of sum[i]): what reaches
    # the view X0[j] is size(i) times it, not a sum along an axis it lacks (N0307, found by
    # tests/fuzz/test_random_gradients.py)
    "axis i = 3, j = 3, k = 2\nin X0[i]: f32\nE0[k j] = sum[i]((X0 + X0[j]))\nout E0: f32\n",
    "axis i = 3, j = 3\nin X[i]: f32\nin W[j]: f32\nY[j] = sum[i](X[j] * W + X)\nout Y: f32\n",
    "axis i = 3, j = 4\nin X[j]: f32\nY[i] = sum[j](where(X > 0, X * X, -X) + 1)\nout Y: f32\n",
    # tests/regressions/open/grad-view-sum.napkin until now (the renaming view X2[j i] beside
    # X2 under sum[i])
    "axis i = 64, j = 2, k = 64\nin X2[j k]: f32\nE2[j k] = (sum[i]((X2[j i] + X2)) + X2)\n"
    "out E2: f32\n",
])
def test_gradients_of_values_repeated_along_a_summed_axis(text):
    rng = np.random.default_rng(11)
    d = napkin.load(text)
    grad = napkin.grad(d)
    sizes = {a: s for a, s in d.axes.items()}
    inputs = _random_inputs(d, rng, sizes)
    cot = {f"d{s.name}": rng.standard_normal([sizes[a] for a in s.axes]) for s in d.outputs}
    _check_against_finite_differences(d, grad, inputs, cot, rng)


def test_an_integer_output_has_no_cotangent_and_a_gathered_condition_is_copied():
    """argmax's integer output passes no gradient back (it once got a cotangent input and broke
    the walk over the graph); a gather inside a `where`'s condition is copied into the backward
    (it once raised an internal error); the gradient matches the hand-derived formula."""
    import numpy as np
    from napkin.runtime.reference import evaluate
    text = ("axis i = 5\nin X[i]: f32\nin I0[]: i32\n"
            "Y[i] = where(i < X[(I0 // 2)] * 4 + 2, X * X, 0)\nbest[] = argmax[i](X)\n"
            "out Y: f32, best: i32\n")
    d = napkin.load(text)
    grad = napkin.grad(d)
    assert [s.name for s in grad.inputs] == ["X", "I0", "dY"] and "dbest" not in grad.source.text
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, 5)
    I0 = np.int32(3)
    dY = rng.standard_normal(5)
    (dX,) = evaluate(grad, {"X": X, "I0": I0, "dY": dY}, exact=True).values()
    keep = np.arange(5) < X[3 // 2] * 4 + 2
    np.testing.assert_allclose(dX, np.where(keep, 2 * X * dY, 0), rtol=1e-12)


PROJECTED_ATTENTION = """axis b, t, s, m, h
axis d = 5
in Q[b h t d]: f32, K[b h s d]: f32, V[b h s d]: f32, Wo[h d m]: f32
S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)
A[b t h d] = softmax[s](S) * V
R[b t m] = A * Wo
out R: f32
"""


def test_attention_projected_by_the_rest_of_the_diagram_gets_flashattentions_row_term():
    """A feeds `A * Wo`, not an output: its cotangent dA is computed, and D = sum[d](dA * A)
    from it once swept (compiler/gradstats.py), with A copied with its softmax online (one
    FlashAttention pass), instead of the row term sum[s](dP * P) over an N x N array."""
    rng = np.random.default_rng(11)
    d = napkin.load(PROJECTED_ATTENTION)
    grad = napkin.grad(d)
    text = grad.source.text
    assert "D[b h t] = sum[d](dA * A)" in text, text
    assert "A[b t h d] = softmax[s](S) * V" in text, text
    assert "- sum[s](" not in text, text
    sizes = {"b": 2, "t": 5, "s": 5, "m": 3, "h": 3, "d": 5}
    inputs = _random_inputs(d, rng, sizes)
    cot = {"dR": rng.standard_normal((2, 5, 3))}
    _check_against_finite_differences(d, grad, inputs, cot, rng)
