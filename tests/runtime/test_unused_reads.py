"""A gathered position outside its axis in the branch of a `where` not taken is no error
(docs/language.md, runtime/unused_reads.py): the reference and the interpreter read it clamped,
as the emitted CUDA does, and raise N0407 only where the value is used (where it reaches an
output: a reduction, a product, a softmax or a scan folds it into its result, which a where may
still not use). Values against NumPy; the emulator agrees."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError

BACKENDS = ["reference", "interpret", "emulate"]

SHIFT = """\
axis t, e
in X[t e]: f32
Y[t e] = where(e + 1 < size(e), X[t (e + 1)], 0.0) + where(e > 0, X[t (e - 1)], -X[t e])
s[t] = sum[e](where(e + 1 < size(e), X[t (e + 1)] - X[t e], 0.0))
out Y, s: f32
"""

PADDED = """\
axis t, v, m
in E[v m]: f32
in tok[t]: i32               # -1 pads, and so does any id past the table
Z[m t] = where(tok[t] >= 0 and tok[t] < size(v), E[tok[t] m], 0.0)
W[t m] = Z[m t] * 2.0        # read again through a view, in another order
P[t m] = softmax[m](where(tok[t] >= 0 and tok[t] < size(v), E[tok[t] m], -inf))
out W, P: f32
"""


def shifted(X):
    nxt = np.concatenate([X[:, 1:], np.zeros_like(X[:, :1])], axis=1)
    prev = np.concatenate([-X[:, :1], X[:, :-1]], axis=1)
    return nxt + prev, (X[:, 1:] - X[:, :-1]).sum(axis=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_outside_in_the_branch_not_taken_is_no_error(backend, rng):
    X = rng.uniform(-1, 1, (5, 7)).astype(np.float32)
    Y, s = napkin.run(SHIFT, X, backend=backend)
    want_y, want_s = shifted(X.astype(np.float64))
    np.testing.assert_allclose(Y, want_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_ids_masked_by_where(backend, rng):
    E = rng.uniform(-1, 1, (6, 5)).astype(np.float32)
    tok = np.array([0, -1, 5, 6, 2, -3, 9, 1, 4], np.int32)
    W, P = napkin.run(PADDED, E, tok, backend=backend)
    ok = (tok >= 0) & (tok < 6)
    rows = np.where(ok[:, None], E.astype(np.float64)[np.clip(tok, 0, 5)], 0.0)
    np.testing.assert_allclose(W, 2 * rows, rtol=1e-6, atol=1e-6)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    assert np.array_equal(P[~ok], np.zeros((int((~ok).sum()), 5)))  # no key: zeros
    np.testing.assert_allclose(P[ok], (e / e.sum(axis=1, keepdims=True))[ok], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "interpret"])
@pytest.mark.parametrize("text, line, column", [
    # the branch taken at the last position reads outside
    ("Y[t e] = where(e + 1 <= size(e), X[t (e + 1)], 0.0)\nout Y: f32", 3, 34),
    # summed where it is outside: a reduction uses it
    ("s[t] = sum[e](X[t (e + 1)])\nout s: f32", 3, 15),
    # carried through a view and an elementwise function to the output
    ("Z[t e] = exp(X[t (e + 1)])\nY[e t] = Z[t e] * 2.0\nout Y: f32", 3, 14),
    # a condition read outside decides between branches that differ there
    ("Y[t e] = where(X[t (e + 1)] > 0, 1.0, 0.0)\nout Y: f32", 3, 16),
])
def test_a_read_outside_that_is_used_is_n0407_at_the_gather(backend, text, line, column, rng):
    X = rng.uniform(-1, 1, (5, 7)).astype(np.float32)
    with pytest.raises(NapkinError) as exc:
        napkin.run("axis t, e\nin X[t e]: f32\n" + text + "\n", X, backend=backend)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0407" and "is 7 at e=6" in diag.message and "size 7" in diag.message
    assert (diag.span.line, diag.span.col) == (line, column) and diag.help


NESTED = """\
axis t, e
in X[t e]: f32
in I[t e]: i32
Y[t e] = where(e + 1 < size(e), X[t I[t (e + 1)]], 0.0)
out Y: f32
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_of_a_gather_at_positions_read_in_a_branch_not_taken(backend, rng):
    """The backward scatters the cotangent at the forward's positions, `dX[t e] =
    sum[e_](where(P[t e_] == e, g[t e_], 0))` with P = I[t (e + 1)] read outside at the last e_,
    where g is 0: the where's branches agree there, so its condition is not used (it was N0407
    on the reference and the interpreter, while the emulator gave the right values)."""
    t, e = 5, 9
    X = rng.uniform(-1, 1, (t, e)).astype(np.float32)
    index = rng.integers(0, e, (t, e)).astype(np.int32)
    dY = rng.uniform(-1, 1, (t, e)).astype(np.float32)
    grad = napkin.grad(napkin.load(NESTED), wrt=["X"])
    (dX,) = napkin.run(grad, X, index, dY, backend=backend)
    want = np.zeros((t, e))
    for i in range(t):
        for j in range(e - 1):
            want[i, index[i, j + 1]] += dY[i, j]
    np.testing.assert_allclose(dX, want, rtol=1e-6, atol=1e-6)


GUARDED = """\
axis t, e, v
in X[t e]: f32
in W[v e]: f32
in idx[t]: i32               # -1 pads
Y[t] = where(idx >= 0, X * W[idx[t] e], 0.0)
s[t] = where(idx >= 0, logsumexp[e](W[idx[t] e]), -inf)
C[t e] = where(idx >= 0, cumsum[e](W[idx[t] e]), 0.0)
P[t e] = where(idx >= 0, softmax[e](W[idx[t] e] * X), 0.0)
out Y, s, C, P: f32
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_outside_folded_in_a_branch_not_taken_is_no_error(backend, rng):
    """A product, reduction, scan or softmax of rows read at -1 in a where's branch not taken
    folds them into results the where does not use (an MoE's `where(ids >= 0, X * W[ids[t] m],
    0)`): no error, as on the emulator (the reference and the interpreter raised N0407 at the
    product, which uses no such value where the where takes its branch)."""
    X = rng.uniform(-1, 1, (7, 5)).astype(np.float32)
    W = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    idx = np.array([0, -1, 3, -7, 2, 1, -1], np.int32)
    Y, s, C, P = napkin.run(GUARDED, X, W, idx, backend=backend)
    ok = idx >= 0
    rows = W.astype(np.float64)[np.where(ok, idx, 0)]
    np.testing.assert_allclose(Y, np.where(ok, (X * rows).sum(1), 0), rtol=1e-5, atol=1e-6)
    lse = np.log(np.exp(rows).sum(1))
    np.testing.assert_allclose(s, np.where(ok, lse, -np.inf), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(C, np.where(ok[:, None], rows.cumsum(1), 0), rtol=1e-5, atol=1e-6)
    e = np.exp(rows * X)
    np.testing.assert_allclose(P, np.where(ok[:, None], e / e.sum(1, keepdims=True), 0),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("text", [
    "Y[] = sum[t](X * W[idx[t] e])\nout Y: f32",                        # a product
    "Y[t] = where(idx >= -1, X * W[idx[t] e], 0.0)\nout Y: f32",        # the branch taken
    "Y[t e] = where(idx >= 0, 0.0, softmax[t](W[idx[t] e]))\nout Y: f32",   # across rows
])
def test_a_read_outside_folded_into_a_value_used_is_still_n0407(text, rng):
    X = rng.uniform(-1, 1, (7, 5)).astype(np.float32)
    W = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    idx = np.array([0, -1, 3, -7, 2, 1, -1], np.int32)
    head = "axis t, e, v\nin X[t e]: f32\nin W[v e]: f32\nin idx[t]: i32\n"
    for backend in ("reference", "interpret"):
        with pytest.raises(NapkinError) as exc:
            napkin.run(head + text + "\n", X, W, idx, backend=backend)
        diag = exc.value.diagnostics[0]
        assert diag.code == "N0407" and "of `W` is -1 at t=1" in diag.message


@pytest.mark.parametrize("backend", ["reference", "interpret"])
@pytest.mark.parametrize("text", [
    "Y[t e] = where(t > 0, W[idx[t] e], 0.0)\nout Y: f32",
    "Y[t] = where(t > 0, sum[e](W[idx[t] e]), 0.0)\nout Y: f32",
    "Z[e t] = W[idx[t] e]\nY[t e] = where(t > 0, Z[e t] * 2.0, 0.0)\nout Y: f32",
])
def test_n0407_names_a_read_that_is_used(backend, text, rng):
    """The message gives the first point whose read outside is used (t=2, id 5), not the first
    the gather made (t=0, id -1, in the branch not taken: no error by itself)."""
    W = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
    idx = np.array([-1, 0, 5, 1], np.int32)
    with pytest.raises(NapkinError) as exc:
        napkin.run("axis t, e, v\nin W[v e]: f32\nin idx[t]: i32\n" + text + "\n", W, idx,
                   backend=backend)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0407" and "of `W` is 5 at t=2," in diag.message, diag.message


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_of_a_guarded_expert_read(backend, rng):
    """The backward of `where(ids >= 0, W[ids[t k] m f] * X, 0)` multiplies the gathered rows
    by a cotangent the where zeroed at the ids -1 (`dX_f = g7 * t6`, a contraction over k): 0
    times the clamped row is no use of it (it was N0407 on the reference and the interpreter
    for a forward they ran). Values against the reference's own derivative in float64."""
    from napkin.runtime.reference import evaluate
    d = napkin.load(MOE)
    grad = napkin.grad(d)
    t, m, f, e, k = 6, 5, 4, 3, 2
    ins = dict(X=rng.standard_normal((t, m)), W=rng.standard_normal((e, m, f)),
               ids=np.array([[0, -1], [2, 1], [-1, -1], [1, 2], [0, 0], [2, -1]], np.int32),
               gate=rng.standard_normal((t, k)), dY=rng.standard_normal((t, f)))
    rows = np.where((ins["ids"] >= 0)[..., None, None], ins["W"][np.maximum(ins["ids"], 0)], 0)
    H = np.einsum("tkmf,tm->tkf", rows, ins["X"])
    gh = 0.5 * (1 + np.tanh(0.7978845608028654 * (H + 0.044715 * H ** 3)))
    gh = gh + 0.5 * H * (1 - np.tanh(0.7978845608028654 * (H + 0.044715 * H ** 3)) ** 2) * (
        0.7978845608028654 * (1 + 3 * 0.044715 * H * H))
    dH = ins["dY"][:, None, :] * ins["gate"][..., None] * gh
    want = np.einsum("tkf,tkmf->tm", dH, rows)
    args = {a: v.astype(np.float32) if v.dtype == np.float64 else v for a, v in ins.items()}
    dX, dW, dgate = napkin.run(grad, **args, backend=backend)
    np.testing.assert_allclose(dX, want, rtol=1e-4, atol=1e-5)
    exact = evaluate(grad, ins, exact=True)
    np.testing.assert_allclose(dW, exact["dW"], rtol=1e-4, atol=1e-5)
    assert not np.isnan(dgate).any()


MOE = """\
axis t, m, f, e, k
in X[t m]: f32
in W[e m f]: f32
in ids[t k]: i32
in gate[t k]: f32
H[t k f] = where(ids >= 0, W[ids[t k] m f] * X, 0.0)
Y[t f] = sum[k](gate * gelu(H))
out Y: f32
"""
