"""Language 1.1 on every CPU backend: integer and boolean inputs, integer outputs and the new
functions, on the reference, the interpreter and the emitted CUDA (one emulator build),
against NumPy formulas written independently here, on odd sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import compare, reference

FUNCTIONS = """\
axis r, c
in X[r c]: f32
in P[r c]: f32
in k[r c]: i32
in M[r c]: bool
E[r c] = erf(X) + log1p(P) + expm1(X) * 0.5 + sin(3 * X) - cos(X)
F[r c] = floor(X * 3) + ceil(X * 3) + mod(X * 5, 2.5) + pow(P, X) + P ** 2
I[r c] = mod(k * 7 - 20, 5) + int(X * 4) + where(M, k, -k) + abs(k - 4) + int(M) + c - r
out E, F: f32
out I: i32
"""


def inputs(rng, r=37, c=45):
    return {"X": rng.standard_normal((r, c)).astype(np.float32),
            "P": rng.uniform(0.1, 3.0, (r, c)).astype(np.float32),
            "k": rng.integers(-50, 50, (r, c)).astype(np.int32),
            "M": rng.random((r, c)) < 0.5}


def numpy_formulas(a):
    x, p = a["X"].astype(np.float64), a["P"].astype(np.float64)
    k, m = a["k"].astype(np.int64), a["M"]
    erf = np.vectorize(math.erf)(x)
    e = erf + np.log1p(p) + np.expm1(x) * 0.5 + np.sin(3 * x) - np.cos(x)
    f = np.floor(x * 3) + np.ceil(x * 3) + np.mod(x * 5, 2.5) + p ** x + p ** 2
    r, c = np.indices(x.shape)
    i = np.mod(k * 7 - 20, 5) + np.trunc(x * 4).astype(np.int64) + np.where(m, k, -k) \
        + np.abs(k - 4) + m.astype(np.int64) + c - r
    return {"E": e, "F": f, "I": i}


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_functions_and_integers_on_every_backend(backend, rng):
    d = napkin.load(FUNCTIONS)
    a = inputs(rng)
    want = numpy_formulas(a)
    out = dict(zip(("E", "F", "I"), napkin.run(d, *a.values(), backend=backend)))
    assert out["I"].dtype == np.int32
    np.testing.assert_array_equal(out["I"], want["I"])
    ref = reference.evaluate(d, a)
    low = reference.evaluate(d, a, precision="lowp")
    for name in ("E", "F"):
        np.testing.assert_allclose(ref[name], want[name], rtol=1e-12, atol=1e-12)
        verdict = compare.check(out[name], ref[name], low[name], "f32", name)
        assert verdict.ok, verdict.message


DOCUMENTS = """\
axis q, x, d
in Q[q d]: f32, K[x d]: f32, V[x d]: f32
in doc[x]: i32
in keep[x]: bool
S[q x] = where(doc[q] == doc[x] and keep, Q * K, -inf)
O[q d] = softmax[x](S) * V
n[q] = int(sum[x](int(doc[q] == doc[x])))
out O: f32
out n: i64
"""


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_a_document_mask_from_integer_ids(backend, rng):
    """Packed sequences: ids renamed for queries and keys, a boolean padding mask; rows whose
    document is entirely padded give 0."""
    t, dd = 70, 16
    Q, K, V = (rng.standard_normal((t, dd)).astype(np.float32) for _ in range(3))
    doc = np.sort(rng.integers(0, 6, t)).astype(np.int32)
    keep = rng.random(t) < 0.8
    keep[doc == doc[0]] = False          # the first document is all padding
    O, n = napkin.run(DOCUMENTS, Q, K, V, doc, keep, backend=backend)
    same = doc[:, None] == doc[None, :]
    s = np.where(same & keep[None, :], Q.astype(np.float64) @ K.astype(np.float64).T, -np.inf)
    m = np.where(np.isfinite(s.max(1)), s.max(1), 0)[:, None]
    e = np.exp(s - m)
    l = e.sum(1, keepdims=True)
    want = np.where(l > 0, (e / np.where(l > 0, l, 1)) @ V.astype(np.float64), 0)
    np.testing.assert_allclose(O, want, rtol=2e-5, atol=2e-6)
    assert np.all(O[doc == doc[0]] == 0)
    np.testing.assert_array_equal(n, same.sum(1))


ARG = """\
axis t, v
in Z[t v]: f32
best[t] = argmax[v](Z)
worst[t] = argmin[v](Z)
out best, worst: i32
"""


def arg_inputs(rng):
    """Few distinct values (many ties), a few NaN, and a row with nothing but -inf."""
    Z = rng.integers(-3, 4, (23, 37)).astype(np.float32)
    Z[rng.random(Z.shape) < 0.02] = np.nan
    Z[5] = -np.inf
    return {"Z": Z}


def choices():
    from napkin.compiler.search import Choice
    return [Choice((("t", 2),), ("v", 4), (), None),          # streamed: a running (value, position)
            Choice((("t", 3),), None, (), ("v", 8)),          # split over lanes: merged by shuffles
            Choice((("t", 2),), ("v", 5), (), ("v", 4))]      # both: lanes of each chunk, then merged


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_argmax_and_argmin_stream_and_merge(backend, rng):
    from napkin.compiler.plan import plan
    from napkin.compiler.variants import with_choices
    from napkin.pipeline import run_plan
    from napkin.runtime.interpret import interpret
    d = napkin.load(ARG)
    a = arg_inputs(rng)
    Z = a["Z"]
    p = plan(d, "h100", {"t": 23, "v": 37})
    cases = [with_choices(p, [c]) for c in choices()]
    for q in cases if backend == "interpret" else cases[-1:]:     # one emulator build
        out = interpret(q, a) if backend == "interpret" else run_plan(q, a, q.sizes)
        np.testing.assert_array_equal(out["best"], np.argmax(Z, axis=1))
        np.testing.assert_array_equal(out["worst"], np.argmin(Z, axis=1))


SCANS = """\
axis t, v
in Z[t v]: f32
C[t v] = cumsum[v](Z)
P[t v] = cumprod[v](1 + Z / 10)
s[t] = sum[v](cumsum[v](Z) * Z)
out C, P, s: f32
"""


@pytest.mark.parametrize("backend", ["reference", "interpret"])
def test_scans_on_the_reference_and_interpreter(backend, rng):
    Z = rng.standard_normal((23, 37)).astype(np.float32)
    z = Z.astype(np.float64)
    want = (np.cumsum(z, 1), np.cumprod(1 + z / 10, 1), (np.cumsum(z, 1) * z).sum(1))
    for got, w in zip(napkin.run(SCANS, Z, backend=backend), want):
        np.testing.assert_allclose(got, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("choice, backend", [((("t", 2), ("v", 5)), "interpret"),
                                             ((("t", 3), ("v", 4)), "interpret"),
                                             ((("t", 3), ("v", 4)), "emulate")])
def test_scans_under_tiles_chunks_and_splits(choice, backend, rng):
    """Streamed and split along the scanned axis (and grouped where a kernel weaves it): a
    prefix still reads every position before its block's tile or chunk."""
    from napkin.compiler.plan import plan
    from napkin.compiler.variants import with_choices
    from napkin.compiler.search import Choice
    from napkin.pipeline import run_plan
    from napkin.runtime.interpret import interpret
    d = napkin.load(SCANS)
    a = {"Z": rng.standard_normal((23, 37)).astype(np.float32)}
    p = plan(d, "h100", {"t": 23, "v": 37})
    group = dict(choice)
    picks = []
    for kp in p.kernels:
        grouped = tuple((x, group[x]) for x in kp.model.woven if x in group)
        stream = ("v", 4) if "v" in kp.model.reduced else None
        split = ("v", 2) if "v" in kp.model.reduced else None
        picks.append(Choice(grouped, stream, (), split))
    q = with_choices(p, picks)
    assert any(kp.schedule.stream for kp in q.kernels)
    ref = reference.evaluate(d, a)
    got = interpret(q, a) if backend == "interpret" else run_plan(q, a, q.sizes)
    tol = 1e-12 if backend == "interpret" else 2e-5
    for name in ("C", "P", "s"):
        np.testing.assert_allclose(got[name], ref[name], rtol=tol, atol=tol)


def test_a_compiled_kernel_takes_integer_inputs_that_fit(rng):
    """napkin.compile's Kernel (as napkin.run) converts integers between widths when every
    value fits, but never takes floats for integers."""
    k = napkin.compile("cross_entropy", backend="interpret")
    Z = rng.standard_normal((5, 9)).astype(np.float16)
    label = rng.integers(0, 9, 5).astype(np.int32)
    (L,) = k(Z, label)
    z = Z.astype(np.float64)
    want = np.log(np.exp(z).sum(1)) - z[np.arange(5), label]
    np.testing.assert_allclose(L.astype(np.float64), want, rtol=2e-3)
    (L64,) = k(Z, label.astype(np.int64))
    np.testing.assert_array_equal(L64, L)
    with pytest.raises(NapkinError) as exc:
        k(Z, label.astype(np.float32))
    assert exc.value.code == "N0405" and "declared i32" in str(exc.value)
    with pytest.raises(NapkinError) as exc:
        k(Z, label.astype(np.int64) + 2 ** 40)       # does not fit: refused, not wrapped
    assert exc.value.code == "N0405"
    (Lr,) = napkin.run("cross_entropy", Z, label.astype(np.int64))
    np.testing.assert_array_equal(Lr, L)
