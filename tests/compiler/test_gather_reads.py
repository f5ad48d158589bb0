"""Gathered and shifted reads cost what they fetch (compiler/gather_reads.py): a table's
unique bytes at HBM, per block the values its positions reach at L2 (the rest hit L1), and
a gathered bias table in FlashAttention lives in global memory, not in a shared tile. The
figures' terms against bytes counted by hand (h100 model); the plans against float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin
from napkin.compiler import target as targets
from napkin.compiler.buffers import buffers
from napkin.compiler.plan import plan

H100 = targets.load("h100")
HBM, L2 = H100.levels[1].bandwidth, H100.l2_bandwidth

SHIFT = """\
axis b, t, c
axis k = 4
in X[b t c]: f16
Y[b t c] = sum[k](where(t >= k, X[b (t - k) c], 0.0))
out Y: f16
"""

CONV = """\
axis b, t, ci, co
axis k = 3
in X[b t ci]: f32
in W[k ci co]: f32
Y[b t co] = sum[k ci](where(t >= k, X[b (t - k) ci], 0.0) * W)
out Y: f32
"""

T5 = """\
axis h, q, x
axis d = 16, r = 33
in Q[h q d]: f16
in K[h x d]: f16
in V[h x d]: f16
in B[r h]: f32
S[h q x] = where(x <= q, Q * K + B[(minimum(q - x, 32)) h], -inf)
O[h q d] = softmax[x](S) * V
out O: f16
"""


def _sector(row_bytes: float) -> float:
    return math.ceil(row_bytes / 32) * 32 / row_bytes


def test_shifted_taps_cross_hbm_once_and_l2_once_per_block_reach():
    """A causal shift of 4 taps over t (b=8 t=4096 c=2048, f16): HBM moves X and Y once
    (268 MB, where each tap counted as a fresh read made 671 MB); a block of g_t rows and a
    chunk of s_k taps fetches g_t + s_k - 1 rows of X per chunk from L2."""
    b, t, c = 8, 4096, 2048
    (kp,) = plan(napkin.load(SHIFT), "h100", {"b": b, "t": t, "c": c}).kernels
    g = {"b": b, "t": t, "c": c, **dict(kp.choice.group)}
    s_k = kp.choice.stream[1] if kp.choice.stream and kp.choice.stream[0] == "k" else 4
    X = Y = b * t * c * 2
    terms = dict(kp.cost.terms)
    assert terms["HBM bandwidth"] == pytest.approx((X + Y) / HBM, rel=1e-3)
    blocks = (b / g["b"]) * (t / g["t"]) * (c / g["c"])
    per_block = (4 / s_k) * g["b"] * min(g["t"] + s_k - 1, t) * g["c"] * 2
    fetched = min(blocks * per_block, X * 4) * _sector(g["c"] * 2)
    assert kp.cost.levels[1].H == pytest.approx(fetched + Y, rel=1e-6)
    assert terms["L2 bandwidth"] == pytest.approx((fetched - X) / L2, rel=1e-6)


def test_a_convolution_charges_its_input_once_at_hbm():
    """conv1d (f32 b=8 t=4096 ci=co=512, k=3): X, W and Y once at HBM, not X per tap."""
    b, t, ci, co = 8, 4096, 512, 512
    (kp,) = plan(napkin.load(CONV), "h100", {"b": b, "t": t, "ci": ci, "co": co}).kernels
    unique = (b * t * ci + 3 * ci * co + b * t * co) * 4
    assert dict(kp.cost.terms)["HBM bandwidth"] == pytest.approx(unique / HBM, rel=0.02)


def test_a_gathered_bias_table_lives_in_global_memory_read_per_score():
    """T5's bias table (33 x 16 f32, 2,112 bytes) in FlashAttention: no shared tile in M nor
    in the memory table, one row at global of the table's bytes; HBM moves Q, K, V, O and
    the table once (before: a [s_x g_q] f32 tile, 22.6 KB of M; h*q*x*4 bytes at HBM)."""
    h, n, d = 16, 2048, 16
    p = plan(napkin.load(T5), "h100", {"h": h, "q": n, "x": n})
    (kp,) = p.kernels
    rows = buffers(p, kp)
    table = [r for r in rows if r["name"].startswith("B")]
    assert [(r["level"], r["bytes"]) for r in table if r["level"] != "registers"] == \
        [("global", 33 * h * 4)]
    smem = sum(r["bytes"] for r in rows if r["level"] == "smem")
    bounds = 16 * math.ceil(kp.cost.threads / 32)   # (the causal loop's bounds, per warp)
    assert smem + bounds == kp.cost.levels[1].M
    unique = 4 * h * n * d * 2 + 33 * h * 4
    assert dict(kp.cost.terms)["HBM bandwidth"] == pytest.approx(unique / HBM, rel=0.02)


@pytest.mark.parametrize("backend", ["interpret", pytest.param("emulate", marks=pytest.mark.thorough)])
def test_shifted_taps_match_float64(backend):
    rng = np.random.default_rng(3)
    b, t, c = 3, 37, 45
    X = rng.uniform(-1, 1, (b, t, c)).astype(np.float16)
    (Y,) = napkin.run(SHIFT, X, backend=backend, target="h100")
    x = X.astype(np.float64)
    want = sum(np.pad(x, ((0, 0), (k, 0), (0, 0)))[:, :t] for k in range(4))
    np.testing.assert_allclose(Y.astype(np.float64), want, atol=2e-2)


@pytest.mark.parametrize("backend", ["interpret", pytest.param("emulate", marks=pytest.mark.thorough)])
def test_a_shifted_convolution_matches_float64(backend):
    rng = np.random.default_rng(4)
    b, t, ci, co = 2, 33, 19, 21
    X = rng.uniform(-1, 1, (b, t, ci)).astype(np.float32)
    W = rng.uniform(-1, 1, (3, ci, co)).astype(np.float32)
    (Y,) = napkin.run(CONV, X, W, backend=backend, target="h100")
    x = X.astype(np.float64)
    want = sum(np.einsum("bti,io->bto", np.pad(x, ((0, 0), (k, 0), (0, 0)))[:, :t], W[k])
               for k in range(3))
    np.testing.assert_allclose(Y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["interpret", pytest.param("emulate", marks=pytest.mark.thorough)])
def test_t5_bias_at_the_tiling_the_planner_now_picks_matches_float64(backend):
    """The planner's h100 choice at h=16 q=x=2048 moved to g_q=32, s_x=32 (was 64, 16):
    that tiling forced at odd sizes, against float64."""
    rng = np.random.default_rng(6)
    h, n, d = 2, 45, 16
    Q, K, V = (rng.uniform(-1, 1, (h, n, d)).astype(np.float16) for _ in range(3))
    B = rng.uniform(-2, 2, (33, h)).astype(np.float32)
    (O,) = napkin.run(T5, Q, K, V, B, backend=backend, target="h100",
                      group={"q": 32}, stream={"x": 32})
    q, x = np.arange(n)[:, None], np.arange(n)[None, :]
    Qd, Kd, Vd = (a.astype(np.float64) for a in (Q, K, V))
    S = np.einsum("hqd,hxd->hqx", Qd, Kd) + B[np.minimum(np.maximum(q - x, 0), 32), :].transpose(2, 0, 1)
    S = np.where(x <= q, S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    want = np.einsum("hqx,hxd->hqd", P / P.sum(-1, keepdims=True), Vd)
    np.testing.assert_allclose(O.astype(np.float64), want, atol=2e-2)


def test_a_clamped_gather_plans_where_some_extents_are_fixed_and_others_searched():
    """A position over an axis of fixed size (i = 7, one extent for every candidate) beside
    searched ones (arrays per candidate): the span's box mixed scalars and arrays and the
    planner raised (a random diagram of tests/fuzz, hopper-toy); now it plans and runs."""
    text = ("axis j, k\naxis i = 7\nin E[j k]: f32\n"
            "Y[i k j] = E[minimum(maximum((j * 3), 0), (size(j) - 1)) k] * i\nout Y: f32\n")
    rng = np.random.default_rng(8)
    E = rng.uniform(-1, 1, (7, 129)).astype(np.float32)
    (Y,) = napkin.run(text, E, backend="interpret", target="hopper-toy")
    j = np.minimum(np.arange(7) * 3, 6)
    want = E.astype(np.float64)[j, :].T[None, :, :] * np.arange(7)[:, None, None]
    np.testing.assert_allclose(Y, want, rtol=1e-6)
