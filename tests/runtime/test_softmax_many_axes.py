"""A softmax over three or more axes (compiler/canonical.py `_written_softmax`): written out
into max, exp, sum and a quotient whose reductions nest, so it plans at any size; held on the
interpreter and the emulator to a float64 NumPy oracle written here, with the language's
edge rows (fully masked: 0, a `+inf`: NaN, logsumexp of a masked row: -inf) and values whose
exponentials overflow unless the maximum is subtracted first."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import ir
from napkin.compiler.canonical import canonicalize

from . import close



def softmax64(x, axes):
    """Softmax in float64 over `axes`; fully -inf rows give 0 (docs/language.md)."""
    m = x.max(axis=axes, keepdims=True)
    e = np.exp(x - np.where(np.isneginf(m), 0.0, m))
    s = e.sum(axis=axes, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s == 0, 0.0, e / s)


def logsumexp64(x, axes):
    m = x.max(axis=axes, keepdims=True)
    shift = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(x - shift).sum(axis=axes, keepdims=True)) + shift).squeeze(axes)


def assert_close(out, want, dtype="f32", slack=64.0):
    close.assert_close(out, want, dtype, slack, floor=1e-6)


# the batch axis b sits between the normalised axes in X's layout; Y lays out z y (y z adjacent
# in one order in X and Y would merge into one axis, compiler/merge.py, and the softmax over
# two axes would stay one op)
BATCH_INSIDE = """axis b, x, y, z
in X[x b y z]: {dtype}
Y[x b z y] = softmax[x y z](X)
L[b] = logsumexp[z x y](X)
out Y, L: f32
"""


def edge_rows(X, rng):
    """Batch 1 fully -inf, batch 2 around 3e4 (exp overflows without the max subtracted),
    batch 3 half masked; batch 0 plain."""
    X[:, 1] = -np.inf
    X[:, 2] = X[:, 2] * 50 + 3e4
    X[:, 3] = np.where(rng.random(X[:, 3].shape) < 0.5, -np.inf, X[:, 3])
    return X


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("shape,dtype", [((5, 7, 9), "f32"), ((17, 3, 33), "f16")])
def test_a_softmax_over_three_axes_matches_the_oracle(backend, shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x, y, z = shape
    X = edge_rows(rng.standard_normal((x, 4, y, z)) * 3, rng)
    X = X.astype({"f32": np.float32, "f16": np.float16}[dtype])
    Y, L = napkin.run(napkin.load(BATCH_INSIDE.format(dtype=dtype)), backend=backend, X=X)
    x64 = X.astype(np.float64)
    want = softmax64(x64, (0, 2, 3)).transpose(0, 1, 3, 2)     # Y[x b z y]
    assert_close(Y, want)
    assert np.all(Y[:, 1] == 0) and np.allclose(Y.sum((0, 2, 3)), [1, 0, 1, 1])
    assert np.isneginf(L[1])
    assert_close(L, logsumexp64(x64, (0, 2, 3)), dtype, slack=8.0)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_a_row_holding_inf_is_nan_and_four_axes_normalise(backend):
    text = ("axis a, b, c, d, e\nin X[e a b c d]: f32\n"
            "Y[e a c b d] = softmax[a b c d](X)\nout Y: f32\n")   # (not merged: merge.py)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3, 3, 5, 2, 7)).astype(np.float32)
    X[0, 2, 1, 1, 3] = np.inf
    (Y,) = napkin.run(napkin.load(text), backend=backend, X=X)
    assert np.isnan(Y[0]).all() and not np.isnan(Y[1:]).any()
    with np.errstate(invalid="ignore"):
        want = softmax64(X.astype(np.float64), (1, 2, 3, 4)).transpose(0, 1, 3, 2, 4)
    assert_close(Y, want)


@pytest.mark.parametrize("n", [64, 128])
def test_a_softmax_over_three_axes_plans_at_large_sizes(n):
    text = "axis b, x, y, z\nin X[b x y z]: f32\nY[b x z y] = softmax[x y z](X)\nout Y: f32\n"
    assert "total: " in napkin.compile(text, backend="interpret").explain(b=2, x=n, y=n, z=n)


def _ops(text):
    g = canonicalize(napkin.load(text).ir)
    return [ir.op(g, n) for n in g]


def test_only_softmaxes_over_three_or_more_axes_are_written_out():
    # one axis: attention's online softmax pairs it with its contraction; two: one streams and
    # one splits. Both stay one op; three become max and sum, nested, around exp and a quotient
    attention = _ops("attention")
    assert [o.axes for o in attention if isinstance(o, ir.Softmax)] == [("x",)]
    # (the normalised axes apart in X: adjacent, in one order, they merge into one axis)
    two = _ops("axis x, b, y\nin X[x b y]: f32\nY[x b y] = softmax[x y](X)\nout Y: f32\n")
    assert [o.axes for o in two if isinstance(o, ir.Softmax)] == [("x", "y")]
    three = _ops("axis x, y, z, b, c\nin X[x b y c z]: f32\n"
                 "Y[x b y c z] = softmax[x y z](X)\nout Y: f32\n")
    assert not any(isinstance(o, ir.Softmax) for o in three)
    reductions = sorted((o.fn, o.axes) for o in three if isinstance(o, ir.Reduce))
    assert reductions == [("max", ("x",)), ("max", ("y", "z")), ("sum", ("x",)),
                          ("sum", ("y", "z"))]


def test_a_softmax_over_axes_adjacent_in_one_order_is_over_their_merged_axis():
    # (compiler/merge.py) a reshape: one softmax over one axis, nothing written out
    for axes in ("x y", "x y z"):
        ops = _ops(f"axis {axes.replace(' ', ', ')}\nin X[{axes}]: f32\n"
                   f"Y[{axes}] = softmax[{axes}](X)\nout Y: f32\n")
        merged = f"({axes.replace(' ', '*')})"
        assert [o.axes for o in ops if isinstance(o, ir.Softmax)] == [(merged,)]
        assert not any(isinstance(o, ir.Reduce) for o in ops)
