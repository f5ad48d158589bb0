"""Language 1.1: integer and boolean arrays, their type rules and conversions (docs/language.md),
checked on the float64 reference against NumPy formulas written independently here."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import ir
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import reference

CROSS_ENTROPY = """\
axis t, v
in Z[t v]: f32               # logits
in label[t]: i32             # the correct class of each token
L[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))
best[t] = argmax[v](Z)
out L: f32
out best: i32
"""

DOCUMENT_MASK = """\
axis q, x, d
in Q[q d]: f32, K[x d]: f32, V[x d]: f32
in doc[x]: i32               # document id of every token
S[q x] = where(doc[q] == doc[x], Q * K, -inf)
O[q d] = softmax[x](S) * V
out O: f32
"""


def kinds(text: str) -> dict[str, str]:
    """The value kind of every named array of a diagram."""
    d = napkin.load(text)
    g = d.ir
    return {name: ir.kind_of_dtype(ir.type_of(g, n).dtype) for name, n in g.graph["arrays"].items()}


def test_the_language_page_cross_entropy(rng):
    Z = rng.standard_normal((13, 37)).astype(np.float32)
    label = rng.integers(0, 37, 13).astype(np.int32)
    out = reference.evaluate(napkin.load(CROSS_ENTROPY), {"Z": Z, "label": label})
    z = Z.astype(np.float64)
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    np.testing.assert_allclose(out["L"], lse - z[np.arange(13), label], rtol=1e-12)
    assert out["best"].dtype == np.int32
    np.testing.assert_array_equal(out["best"], z.argmax(1))


def test_the_language_page_document_mask(rng):
    n, d = 29, 8
    Q, K, V = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
    doc = np.sort(rng.integers(0, 4, n)).astype(np.int32)
    out = reference.evaluate(napkin.load(DOCUMENT_MASK), dict(Q=Q, K=K, V=V, doc=doc))["O"]
    s = Q.astype(np.float64) @ K.astype(np.float64).T
    s = np.where(doc[:, None] == doc[None, :], s, -np.inf)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(out, (p / p.sum(1, keepdims=True)) @ V.astype(np.float64),
                               rtol=1e-10)


@pytest.mark.parametrize("rhs, kind", [
    ("k + 1", "int"), ("k * x - 3", "int"), ("k + 1.0", "float"), ("k / 2", "float"),
    ("x / 2", "float"), ("k ** 2", "float"), ("mod(k, 3)", "int"), ("mod(X, 3)", "float"),
    ("abs(-k)", "int"), ("floor(k)", "int"), ("floor(X)", "int"), ("ceil(X / 2)", "int"), ("int(X)", "int"),
    ("float(k)", "float"), ("where(M, k, 0)", "int"), ("where(M, k, 0.5)", "float"),
    ("maximum(k, x)", "int"), ("exp(k)", "float"), ("k == x", "bool"), ("int(M)", "int"),
    ("size(x) - x", "int"), ("argmax[x](X)", "int"), ("max[x](k * x)", "float"),
    ("sum[x](where(M, 1, 0))", "float"), ("int(sum[x](int(M)))", "int"),
])
def test_kind_rules(rhs, kind):
    lhs = "t" if "[x](" in rhs else "t x"      # a reduction along x drops it
    text = f"axis t, x\nin X[t x]: f32\nin k[t]: i64\nin M[t x]: bool\nR[{lhs}] = {rhs}\n" \
           "Y[t] = sum[x](X)\nout Y: f32"
    assert kinds(text)["R"] == kind


def test_a_contraction_of_integers_is_a_float_sum():
    assert kinds("axis a, b\nin I[a b]: i32, J[b]: i32\nC[a] = I * J\nD[a] = C + 1\nout D: f32")["D"] \
        == "float"


def test_integer_arithmetic_is_exact_past_float_precision(rng):
    big = np.array([2 ** 40 + 3, -(2 ** 35) - 7, 12], np.int64)
    out = napkin.run("axis a\nin k[a]: i64\nR[a] = k * 3 - 1\nout R: i64", big)[0]
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, big * 3 - 1)


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_an_integer_literal_is_exact_past_float_precision(backend):
    """`2^53 + 1` written in a diagram is that integer: its value was read as a float (the
    literal's text through float(), exact to 2^53 only) and every backend added 2^53."""
    k = np.array([0, 5, -3], np.int64)
    text = "axis a\nin k[a]: i64\nR[a] = k + 9007199254740993 - a\nout R: i64"
    out = napkin.run(text, k, backend=backend, target="h100")[0]
    np.testing.assert_array_equal(out, k + 9007199254740993 - np.arange(3))


def test_an_integer_literal_past_64_bits_is_an_error():
    """It was read as a float, and the backends disagreed: the reference and the interpreter
    converted it to a 64-bit integer (undefined: -2^63), the emitted CUDA multiplied by 1e23."""
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis a\nin X[a]: f32\nR[a] = X * 99999999999999999999999\nout R: f32")
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0505" and "64-bit" in diag.message
    assert (diag.span.line, diag.span.col) == (3, 12) and "1e22" in diag.help
    napkin.load("axis a\nin X[a]: f32\nR[a] = X * 9223372036854775807\nout R: f32")


WRAPS = ("axis n\nin a[n]: i64, b[n]: i64\nQ[n] = a // b\nM[n] = mod(a, b)\n"
         "W[n] = a * b + a - b\nN[n] = -a + abs(a) + relu(a)\nout Q, M, W, N: i64")
_TOP, _BOTTOM = np.iinfo(np.int64).max, np.iinfo(np.int64).min
_A = np.array([_TOP, _BOTTOM, 7, _BOTTOM, -7, _TOP - 1, 3], np.int64)
_B = np.array([2, -1, -1, 3, 0, -1, -2], np.int64)


def _wrapped(a, b):
    """Python's integers, wrapped to 64 bits: what docs/language.md says every backend gives."""
    def wrap(v):
        return (v + 2 ** 63) % 2 ** 64 - 2 ** 63
    rows = [(wrap(x // y) if y else 0, x % y if y else 0, wrap(x * y + x - y),
             wrap(-x + abs(x) + max(x, 0))) for x, y in zip(map(int, a), map(int, b))]
    return [np.array(col, np.int64) for col in zip(*rows)]


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_integer_arithmetic_wraps_at_the_ends_of_the_range(backend):
    """-2^63 // -1 and mod(-2^63, -1) overflow a C division: the emulated kernel died of SIGFPE
    (x86 traps; a GPU does not); `relu` of a 64-bit integer went through a float on the CPU
    backends (0.0 as its other branch: relu(2^63 - 1) was -2^63)."""
    with np.errstate(over="ignore", divide="ignore"):
        got = napkin.run(WRAPS, _A, _B, backend=backend, target="h100")
    for name, g, want in zip("QMWN", got, _wrapped(_A, _B)):
        np.testing.assert_array_equal(g, want, err_msg=name)


@pytest.mark.thorough
def test_integer_overflow_is_no_undefined_behaviour_in_the_emitted_cuda():
    """+ - * and negation of integers wrap by definition (napkin_iadd...: unsigned arithmetic):
    under UndefinedBehaviorSanitizer the emulated kernel stopped at `signed integer overflow`
    (C++ leaves it undefined, and a compiler may assume it never happens)."""
    from napkin import pipeline
    d = napkin.load(WRAPS)
    p = pipeline.plan(d, pipeline.Options.make(target="h100", shape={"n": len(_A)}))
    got = pipeline.run_plan(p, {"a": _A, "b": _B}, {"n": len(_A)}, sanitize="address")
    for name, want in zip("QMWN", _wrapped(_A, _B)):
        np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_mod_takes_the_sign_of_the_divisor(rng):
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([3, 3, -3, -3, 4, 0], np.int32)
    out = napkin.run("axis n\nin a[n]: i32, b[n]: i32\nR[n] = mod(a, b)\nout R: i32", a, b)[0]
    np.testing.assert_array_equal(out, [7 % 3, -7 % 3, 7 % -3, -7 % -3, 0, 0])
    x = np.array([5.5, -5.5, 5.5, -5.5], np.float32)
    y = np.array([2.0, 2.0, -2.0, -2.0], np.float32)
    out = napkin.run("axis n\nin a[n]: f32, b[n]: f32\nR[n] = mod(a, b)\nout R: f32", x, y)[0]
    np.testing.assert_array_equal(out, [5.5 % 2.0, -5.5 % 2.0, 5.5 % -2.0, -5.5 % -2.0])


def test_int_goes_toward_zero_and_is_defined_everywhere():
    x = np.array([2.7, -2.7, 0.5, np.nan, np.inf, -np.inf, 3e19], np.float32)
    out = napkin.run("axis n\nin X[n]: f32\nR[n] = int(X)\nF[n] = floor(X)\nout R, F: i64", x)
    top, bottom = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    np.testing.assert_array_equal(out[0], [2, -2, 0, 0, top, bottom, top])
    np.testing.assert_array_equal(out[1], [2, -3, 0, 0, top, bottom, top])


def test_power_binds_tighter_than_unary_minus_and_groups_right():
    x = np.array([2.0, 3.0], np.float32)
    out = napkin.run("axis n\nin X[n]: f32\nR[n] = -X ** 2\nT[n] = 2 ** X ** 2\nout R, T: f32", x)
    np.testing.assert_array_equal(out[0], -(x ** 2))
    np.testing.assert_array_equal(out[1], 2.0 ** (x ** 2))


def test_boolean_inputs_are_masks(rng):
    S = rng.standard_normal((5, 6)).astype(np.float32)
    M = rng.random((5, 6)) < 0.5
    out = napkin.run("axis q, x\nin S[q x]: f32\nin M[q x]: bool\n"
                     "Y[q x] = where(M and not (S > 1), S, -inf)\nC[q] = sum[x](int(M))\n"
                     "out Y, C: f32", S, M)
    np.testing.assert_array_equal(out[0], np.where(M & ~(S > 1), S, -np.inf))
    np.testing.assert_array_equal(out[1], M.sum(1))


def test_argmax_and_argmin_ties_nan_and_empty():
    X = np.array([[1, 3, 3, 0], [2, np.nan, 5, np.nan], [-1, -1, -1, -1]], np.float32)
    text = "axis r, c\nin X[r c]: f32\nA[r] = argmax[c](X)\nB[r] = argmin[c](X)\nout A, B: i32"
    a, b = napkin.run(text, X)
    np.testing.assert_array_equal(a, [1, 1, 0])
    np.testing.assert_array_equal(b, [3, 1, 0])
    a, b = napkin.run(text, np.zeros((2, 0), np.float32))
    np.testing.assert_array_equal(a, [-1, -1])


def test_an_integer_output_of_a_float_expression_is_an_error():
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis t, v\nin Z[t v]: f32\nm[t] = max[v](Z)\nout m: i32")
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0406" and "int(" in diag.help and diag.span.line == 4


def test_an_output_cannot_be_boolean():
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis t\nin Z[t]: f32\nM[t] = Z > 0\nout M: bool")
    assert exc.value.code == "N0401" and "int(M)" in exc.value.diagnostics[0].help


@pytest.mark.parametrize("declared, given, ok", [
    ("i32", np.float32, False), ("i64", np.float64, False), ("bool", np.int32, False),
    ("bool", np.float32, False), ("i32", np.int64, True), ("i64", np.bool_, True),
    ("bool", np.bool_, True), ("f32", np.int32, True),
])
def test_calls_refuse_arrays_of_the_wrong_kind(declared, given, ok):
    text = f"axis n\nin a[n]: {declared}\nR[n] = where(a, 1, 0)\nout R: i32" if declared == "bool" \
        else f"axis n\nin a[n]: {declared}\nR[n] = a + a\nout R: f32"
    arr = np.ones(3, given)
    for backend in ("reference", "interpret"):
        if ok:
            napkin.run(text, arr, backend=backend)
        else:
            with pytest.raises(NapkinError) as exc:
                napkin.run(text, arr, backend=backend)
            assert exc.value.code == "N0405" and declared in str(exc.value)


def test_every_diagram_on_the_language_page_checks():
    """The page's examples (the first diagram and those of 1.1) parse and check as written;
    test_gathers.py and the tests above compute them."""
    from pathlib import Path
    import re
    page = (Path(__file__).parents[2] / "docs" / "language.md").read_text()
    blocks = re.findall(r"```\n(.*?)```", page, flags=re.S)
    assert len(blocks) >= 4
    for text in blocks:
        napkin.load(text)
    assert CROSS_ENTROPY in blocks and DOCUMENT_MASK in blocks


@pytest.mark.parametrize("declared, given, value", [
    ("i64", np.uint64, 2 ** 63), ("i32", np.uint32, 2 ** 31), ("i32", np.uint64, 2 ** 64 - 1),
])
def test_an_unsigned_value_past_the_signed_range_is_refused(declared, given, value):
    """Unsigned 2^63 became -2^63 as i64 and came back as 2^63: the round trip napkin checks
    conversions with kept it, and the call computed with -2^63. The signs must agree too."""
    arr = np.array([1, value], given)
    with pytest.raises(NapkinError) as exc:
        napkin.run(f"axis n\nin a[n]: {declared}\nR[n] = a + 1\nout R: i64", arr)
    assert exc.value.code == "N0405" and str(value) in str(exc.value)
    out = napkin.run(f"axis n\nin a[n]: {declared}\nR[n] = a + 1\nout R: i64",
                     np.array([1, 7], given))[0]
    np.testing.assert_array_equal(out, [2, 8])
