"""N0704: one axis contracted once over three or more factors, some inside a function
(`silu(X * Wg) * (X * Wu)`). A softmax or scan along the contracted axis is one factor: the
mask and scores inside it are not factors of the product (masked attention in one statement
was warned about, with a hint to rename `x` that would change what it computes), and so is an
index of the axis (`A * where(x < len[b], V, 0.0)`, a paged cache's values masked)."""

from __future__ import annotations

import pytest

import napkin
from napkin.diagrams.diagnostics import Source

HEAD = "axis t, x, m\naxis e = 4\nin S[t x]: f32, V[x e]: f32, U[x]: f32\nin kpos[x]: i32, pos[t]: i32\n"


def _n0704(line: str):
    d = napkin.load(Source("lint.napkin", HEAD + line + "\nout O: f32\n"))
    return [(w.message, (w.span.line, w.span.col)) for w in d.warnings if w.code == "N0704"]


@pytest.mark.parametrize("line", [
    "O[t e] = softmax[x](where(kpos[x] <= pos[t], S, -inf)) * V",   # a mask from two arrays
    "O[t e] = softmax[x](where(kpos <= 3, S * U, -inf)) * V",
    "O[t e] = cumsum[x](exp(S) * U) * V",
    "O[t e] = S * where(x < pos[t], V, 0.0)",              # an index is no factor
    "O[t e] = S * V * exp(float(x) * 0.5)",
])
def test_a_softmax_or_scan_along_the_axis_is_one_factor(line):
    assert _n0704(line) == []


@pytest.mark.parametrize("line,column", [
    ("O[t e] = softmax[x](S) * V * exp(U)", (5, 28)),          # three factors, one in a function
    ("O[t e] = exp(S * U) * (S * V)", (5, 21)),
])
def test_three_factors_with_one_in_a_function_are_still_warned_about(line, column):
    assert _n0704(line) == [("`x` is summed once over this whole product, including inside "
                             "a function", column)]
