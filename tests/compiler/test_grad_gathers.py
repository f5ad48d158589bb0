"""Gradients of version-1.1 diagrams with gathers at computed positions (fuzzed in grad3):
the gathers' positions parsed as written, the gradients against float64 oracles in NumPy."""

from __future__ import annotations

import numpy as np

import napkin
from napkin.runtime.reference import evaluate

ARGMAX_GATHER = """axis t, c
in L[t c]: f32
in V[t c]: f32
Y[t] = V[t argmax[c](L)] * L[t argmin[c](L)]
out Y: f32
"""


def test_a_reduction_written_bare_in_a_position_is_one_position():
    """`V[t argmax[c](L)]` was read as the positions `argmax[c]` and `(L)`: N0302 "`V` has 2
    axes [t c], but 3 are named here" (`(argmax[c](L))` worked). A reduction is no indexed
    array: it is one position. No gradient flows through the index; V and L get theirs at
    the rows' argmax and argmin."""
    rng = np.random.default_rng(7)
    L, V = rng.standard_normal((5, 7)), rng.standard_normal((5, 7))
    dY = rng.standard_normal(5)
    rows, hi, lo = np.arange(5), L.argmax(1), L.argmin(1)
    (Y,) = evaluate(napkin.load(ARGMAX_GATHER), {"L": L, "V": V}, exact=True).values()
    np.testing.assert_allclose(Y, V[rows, hi] * L[rows, lo], rtol=1e-12)
    g = napkin.grad(ARGMAX_GATHER)
    got = evaluate(g, {"L": L, "V": V, "dY": dY}, exact=True)
    dL, dV = np.zeros((5, 7)), np.zeros((5, 7))
    dV[rows, hi] = dY * L[rows, lo]
    dL[rows, lo] = dY * V[rows, hi]
    np.testing.assert_allclose(got["dL"], dL, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got["dV"], dV, rtol=1e-12, atol=1e-15)


def test_napkin_grad_of_a_sum_warns_nothing(tmp_path, capsys, monkeypatch):
    """The gradient of `Y[r] = sum[x](A)` is `dA[r x] = dY`, a broadcast by its rule; `napkin
    grad` printed N0703 "`dA` does not depend on `x` ... remove the axis ... if that is a
    typo" at `<grad:s.napkin>:10:1`, text the user never wrote."""
    from napkin.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.napkin").write_text("axis r, x\nin A[r x]: f32\nY[r] = sum[x](A)\nout Y: f32\n")
    assert main(["grad", "s.napkin"]) == 0
    out, err = capsys.readouterr()
    assert "dA[r x] = dY\n" in out and err == "", err
