"""Gradients of version-1.1 diagrams with gathers at computed positions (fuzzed in grad3):
the gathers' positions parsed as written, the gradients against float64 oracles in NumPy."""

from __future__ import annotations

import numpy as np
import pytest

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


# paged_attention's gradient's first kernel (the probabilities recomputed beside O) at g = r =
# q = 1, reduced: the gathered keys and values, one group, one query head, one query. The
# emitted kernel splits x = 6 over 4 lanes; the store of t20 = exp(S - lse) walked its lanes'
# positions and computed the logsumexp over x inside, each lane over its own two positions
# and the rest of a 6-wide row read past its register array (sums of 0.91): what a store
# reduces over the split axis is computed before the lanes walk it (codegen/kernel._loops).
PAGED_PROBABILITIES = """axis b, g, r, q, n, d = 3, P = 2, x = 6, j = 3
in Q[b g r q d]: f32
in Kc[n P g d]: f32
in Vc[n P g d]: f32
in pages[b j]: i32
t24[b x] = pages[b (x // size(P))]
t14[b x g d] = Kc[(t24) (mod(x, size(P))) g d]
S[b g r q x] = Q * t14
t20_lse[b g r q] = logsumexp[x](S)
t20[b g r q x] = where(t20_lse == -inf, 0, exp(S - t20_lse))
t28[b x g d] = Vc[(t24) (mod(x, size(P))) g d]
O[b g r q d] = softmax[x](S) * t28
out t20: f32, O: f32
"""


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_paged_probabilities_beside_their_output_at_one_query(backend):
    rng = np.random.default_rng(0)
    Q = rng.standard_normal((2, 1, 1, 1, 3)).astype(np.float32)
    Kc, Vc = (rng.standard_normal((4, 2, 1, 3)).astype(np.float32) for _ in range(2))
    pages = np.array([[0, 2, 1], [2, 2, 3]], np.int32)
    t20, O = napkin.run(PAGED_PROBABILITIES, Q, Kc, Vc, pages, backend=backend)
    x = np.arange(6)
    K, V = (c.astype(np.float64)[pages[:, x // 2], x % 2] for c in (Kc, Vc))     # b x g d
    S = np.einsum("bgrqd,bxgd->bgrqx", Q.astype(np.float64), K)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    np.testing.assert_allclose(t20, P, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(O, np.einsum("bgrqx,bxgd->bgrqd", P, V), rtol=1e-5, atol=1e-6)
