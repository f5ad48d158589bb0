"""Diagrams nobody had tried (hand-written fuzz of the language), each reduced to the bug it
found: run on the interpret and emulate backends and held to an independent float64 NumPy
oracle written here (not napkin's reference executor)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin

from .close import assert_close


def run(text, backend, **inputs):
    return napkin.run(napkin.load(text), backend=backend, **inputs)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_a_declared_axis_no_array_uses(backend):
    # The emulator (and CUDA) asked for the size of `u`, an axis declared and never used:
    # KeyError in size_values (the lowering gave every dynamic axis a size parameter).
    text = "axis r, c, u\nin X[r c]: f32\nY[r] = sum[c](X)\nout Y: f32\n"
    X = np.random.default_rng(1).standard_normal((3, 37)).astype(np.float32)
    (Y,) = run(text, backend, X=X)
    assert_close(Y, X.astype(np.float64).sum(1))
    # a reduction over three axes walks every axis of the diagram (KeyError in _box)
    text = "axis a, b, c, u\nin X[a b c]: f32\nT[] = sum[a b c](X)\nout T: f32\n"
    X = np.random.default_rng(2).standard_normal((8, 8, 129)).astype(np.float32)
    (T,) = run(text, backend, X=X)
    assert_close(T, X.astype(np.float64).sum())


FOUR_REDUCTIONS = """axis a, b, c, e
in X[e a b c]: f32
S[e] = sum[a b c](X)
M[e] = max[c a b](X)
N[] = min[e a b c](X)
A[e] = mean[a b c](X)
L[e] = logsumexp[a b c](X)
out S, M, N, A, L: f32
"""


def _lse(x, axes):
    m = x.max(axis=axes, keepdims=True)
    return (np.log(np.exp(x - m).sum(axis=axes, keepdims=True)) + m).squeeze(axes)


def test_a_reduction_over_three_axes_plans_at_large_sizes():
    # One axis streams, one splits across lanes or blocks, a third was held whole: sum[a b c]
    # of a 128^3 array was refused (N0603, 8 MiB of smem); it is now nested, sum[a](sum[b c]).
    k = napkin.compile(FOUR_REDUCTIONS, backend="interpret")
    assert "kernel" in k.explain(a=128, b=128, c=128, e=2)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_reductions_over_three_and_four_axes_match_the_oracle(backend):
    X = np.random.default_rng(3).standard_normal((2, 16, 16, 40)).astype(np.float32)
    S, M, N, A, L = run(FOUR_REDUCTIONS, backend, X=X)
    x = X.astype(np.float64)
    axes = (1, 2, 3)
    for got, want in ((S, x.sum(axes)), (M, x.max(axes)), (N, x.min()), (A, x.mean(axes)),
                      (L, _lse(x, axes))):
        assert_close(got, want, slack=64.0)


def _softmax_last_two(S):
    flat = S.reshape(S.shape[:-2] + (-1,))
    e = np.exp(flat - flat.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).reshape(S.shape)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_attention_over_two_key_axes(backend):
    # softmax[x y] read by a contraction over x and y was paired as an online softmax streaming
    # one of them, which the lowering keeps to one axis: KeyError 'y' (emulate, CUDA) and 'x'
    # (interpret). It now streams in two passes (statistics, then the normalised product).
    text = """axis q, x, y
axis d = 32
in Q[q d]: f16
in K[x y d]: f16
in V[y x d]: f16
S[q x y] = Q * K * 0.2
O[q d] = softmax[x y](S) * V
out O: f32
"""
    rng = np.random.default_rng(4)
    Q = rng.standard_normal((17, 32)).astype(np.float16)
    K = rng.standard_normal((9, 5, 32)).astype(np.float16)
    V = rng.standard_normal((5, 9, 32)).astype(np.float16)
    (O,) = run(text, backend, Q=Q, K=K, V=V)
    S = np.einsum("qd,xyd->qxy", Q.astype(np.float64), K.astype(np.float64)) * 0.2
    assert_close(O, np.einsum("qxy,yxd->qd", _softmax_last_two(S), V.astype(np.float64)), "f16")


def test_a_softmax_over_three_axes_plans_at_64_cubed():
    # A kernel streams one normalised axis and splits one more; a softmax over three held the
    # third whole (N0603, 1 MiB of smem). It is now written out into reductions that nest
    # (canonical._written_softmax; values: tests/runtime/test_softmax_many_axes.py).
    text = "axis x, y, z\nin X[x y z]: f32\nY[x y z] = softmax[x y z](X)\nout Y: f32\n"
    assert "kernel" in napkin.compile(text, backend="interpret").explain(x=64, y=64, z=64)


def test_attention_with_d_256_on_forced_tensor_cores_at_small_sizes():
    """One FlashAttention-2 kernel with Q re-read (the head's O accumulator fills half a
    lane's registers), as at scale; before the re-read budget weighed the scores, no d=256
    tiling fitted and fusion's quick estimates fused P and O on the CUDA cores (N0606)."""
    k = napkin.compile("attention", backend="interpret", engine="tensor-cores", d=256)
    text = k.explain(b=1, h=2, q=33, x=67)
    assert "FlashAttention-2" in text and "Q re-read" in text
