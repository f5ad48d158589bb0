"""The language contract's own position examples (/work/shared/design/language.md, v1.1:
`X[t mod(d + size(d) / 2, size(d))]`, `Kc[pages[b floor(x / P)] mod(x, P) h d]`) read as
written (compiler/positions.py): a quotient of sizes in a position is an integer when it
divides (N0408 when it does not, at load for static sizes, at the call for dynamic ones), and an
axis named bare in a position where it is no wire of the equation is its size. Checked against
NumPy in float64; an axis that IS a wire keeps its index meaning."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError

from .test_gathers import paged_inputs, paged_numpy

ROTATE = "axis t, d\nin X[t d]: f32\nY[t d] = X[t mod(d + size(d) / 2, size(d))]\nout Y: f32\n"

PAGED_AS_WRITTEN = """\
axis b, h, x, d, n, p
axis P = 4
in Q[b h d]: f32
in Kc[n P h d]: f32, Vc[n P h d]: f32
in pages[b p]: i32
S[b h x] = Kc[pages[b floor(x / P)] mod(x, P) h d] * Q / sqrt(size(d))
O[b h d] = softmax[x](S) * Vc[pages[b floor(x / P)] mod(x, P) h d]
out O: f32
"""


def _rotated(X):
    half = X.shape[1] // 2
    return np.concatenate([X[:, half:], X[:, :half]], axis=1)


@pytest.mark.parametrize("backend", ["reference", "emulate"])
def test_the_contracts_rotate_half_divides_sizes_exactly(backend, rng):
    X = rng.standard_normal((7, 18)).astype(np.float32)
    (Y,) = napkin.run(ROTATE, X, backend=backend)
    np.testing.assert_array_equal(Y, _rotated(X))


def test_a_quotient_of_sizes_that_does_not_divide_is_an_error_at_the_call(rng):
    d = napkin.load(ROTATE)                     # d is dynamic: known at the call
    with pytest.raises(NapkinError) as exc:
        napkin.run(d, rng.standard_normal((3, 7)).astype(np.float32), backend="reference")
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0408" and "d=7" in diag.message and "7 / 2 = 3.5" in diag.message
    assert (diag.span.line, diag.span.col) == (3, 30) and "//" in diag.help


def test_a_quotient_of_static_sizes_is_checked_at_load():
    with pytest.raises(NapkinError) as exc:
        napkin.load(ROTATE, d=9)
    assert exc.value.diagnostics[0].code == "N0408"
    assert napkin.load(ROTATE, d=10) is not None


def test_a_quotient_with_an_index_stays_a_float():
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis t, d\nin X[t d]: f32\nY[t d] = X[t mod(d / 2, size(d))]\nout Y: f32")
    assert exc.value.diagnostics[0].code == "N0406"


@pytest.mark.parametrize("backend", ["reference", "emulate"])
def test_the_contracts_paged_positions_read_a_bare_page_axis_as_its_size(backend, rng):
    a, x = paged_inputs(rng, x=11)
    d = napkin.load(PAGED_AS_WRITTEN, x=x)
    (O,) = napkin.run(d, **a, backend=backend)
    np.testing.assert_allclose(O, paged_numpy(a, x), rtol=1e-5, atol=1e-6)


def test_an_axis_that_is_a_wire_keeps_its_index(rng):
    """`P` on the left, and `j` reduced: each is an index in its position, not a size."""
    X = rng.standard_normal(5).astype(np.float32)
    shifted = "axis t, P = 3\nin X[t]: f32\nY[t P] = X[mod(t + P, size(t))]\nout Y: f32"
    (Y,) = napkin.run(shifted, X, backend="reference")
    t, P = np.meshgrid(np.arange(5), np.arange(3), indexing="ij")
    np.testing.assert_array_equal(Y, X[(t + P) % 5])
    window = "axis t, j = 3\nin X[t]: f32\nY[t] = sum[j](X[mod(t + j, size(t))])\nout Y: f32"
    (W,) = napkin.run(window, X, backend="reference")
    np.testing.assert_allclose(W, X[(t + P) % 5].astype(np.float64).sum(1), rtol=1e-6)
