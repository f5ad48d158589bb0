"""Hand-written kernels on the CPU emulator against NumPy: tiled matmul with dynamic shared
memory, a warp-shuffle softmax, every shuffle/vote, atomics across blocks, conversions."""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest

from napkin.runtime.emulate import Launch, Param, run

F32, CF32 = Param("ptr", "float"), Param("ptr", "float", const=True)
I32 = Param("i32", "")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


MATMUL_SIG = {"matmul_tiled": (CF32, CF32, F32, I32, I32, I32)}


def _matmul(kernel, M, N, K, rng, **kw):
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    launch = Launch("matmul_tiled", (cdiv(N, 16), cdiv(M, 16), 1), (16, 16, 1), 2 * 16 * 16 * 4,
                    ("A", "B", "C", M, N, K))
    out = run(kernel("matmul_tiled.cu"), MATMUL_SIG, [launch],
              {"A": A, "B": B, "C": np.full((M, N), np.nan, np.float32)}, **kw)
    return A, B, out


@pytest.mark.parametrize("M,N,K", [(67, 45, 37), (16, 16, 16), (1, 17, 15), (33, 1, 1)])
def test_tiled_matmul_with_masked_tails(kernel, rng, M, N, K):
    A, B, out = _matmul(kernel, M, N, K, rng)
    C, ref = out["C"], A.astype(np.float64) @ B.astype(np.float64)
    assert not np.isnan(C).any(), "every output element must be written"
    naive = (A @ B).astype(np.float64)  # float32 evaluation
    assert np.abs(C - ref).max() <= 2 * np.abs(naive - ref).max() + 1e-5
    assert np.array_equal(out["A"], A) and np.array_equal(out["B"], B)


def test_tiled_matmul_256_runs_in_about_a_second(kernel, rng):
    _matmul(kernel, 256, 256, 64, rng)  # build (or fetch from the cache) first
    start = time.perf_counter()
    A, B, out = _matmul(kernel, 256, 256, 64, rng)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(out["C"], A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    # ~0.3 s normally: the wall-clock bound (100x) catches a pathological emulator (a spinning
    # barrier, a build without optimisation), not a slowdown of a few times on a loaded machine
    assert elapsed < 30.0, f"256x256x64 matmul took {elapsed:.2f} s"


def test_row_softmax_with_warp_shuffles(kernel, rng):
    rows, cols = 13, 333
    X = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    X[3, :] = -1e30  # one row of huge negatives: max subtraction must keep it finite
    out = run(kernel("softmax_rows.cu"), {"softmax_rows": (CF32, F32, I32, I32)},
              [Launch("softmax_rows", (cdiv(rows, 4), 1, 1), (32, 4, 1), 0, ("X", "Y", rows, cols))],
              {"X": X, "Y": np.full((rows, cols), np.nan, np.float32)})
    x = X.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["Y"], e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-7)


def _shfl_src(kind: str, lane: int, arg: int, w: int) -> int:
    """Source lane per the CUDA Programming Guide's description of the __shfl*_sync family."""
    seg = lane - lane % w
    if kind == "idx":
        return seg + arg % w
    if kind == "up":
        return lane - arg if lane % w >= arg else lane
    if kind == "down":
        return lane + arg if lane % w + arg < w else lane
    src = lane ^ arg  # xor: lanes of later groups give the caller's own value
    return src if src < seg + w else lane


def _shuffled(values, kind, arg, w):
    out = np.empty_like(values)
    for t in range(values.size):
        warp, lane = t - t % 32, t % 32
        a = arg(lane) if callable(arg) else arg
        out[t] = values[warp + _shfl_src(kind, lane, a, w)]
    return out


def test_every_shuffle_and_vote(kernel, rng):
    nt = 128
    vi = rng.integers(-1000, 1001, nt).astype(np.int32)
    vf = rng.standard_normal(nt).astype(np.float32)
    vd = rng.standard_normal(nt)
    vl = rng.integers(-(2**62), 2**62, nt, dtype=np.int64)
    bufs = {"vi": vi, "vf": vf, "vd": vd, "vl": vl, "oi": np.zeros((27, nt), np.int32),
            "of": np.zeros((6, nt), np.float32), "od": np.zeros((3, nt)), "ol": np.zeros((3, nt), np.int64)}
    sig = {"shuffles": (Param("ptr", "int", True), CF32, Param("ptr", "double", True),
                        Param("ptr", "long long", True), Param("ptr", "int"), F32, Param("ptr", "double"),
                        Param("ptr", "long long"))}
    out = run(kernel("shuffles.cu"), sig, [Launch("shuffles", (2, 1, 1), (64, 1, 1), 0,
                                                  ("vi", "vf", "vd", "vl", "oi", "of", "od", "ol"))], bufs)
    ei, ef, ed, el = [], [], [], []
    for w in (8, 16, 32):
        ei += [_shuffled(vi, "idx", lambda lane: lane * 3 + 1, w), _shuffled(vi, "idx", 0, w),
               _shuffled(vi, "up", 3, w), _shuffled(vi, "down", 5, w), _shuffled(vi, "xor", 6, w),
               _shuffled(vi, "xor", 9, w)]
        ef += [_shuffled(vf, "xor", 1, w), _shuffled(vf, "down", 1, w)]
        ed.append(_shuffled(vd, "up", 1, w))
        el.append(_shuffled(vl, "xor", 3, w))
    warps = vi.reshape(-1, 32)
    per_warp = lambda f: np.repeat([f(w) for w in warps], 32).astype(np.int64)  # noqa: E731
    ballot = per_warp(lambda w: sum(1 << i for i in range(32) if w[i] & 1))
    half = per_warp(lambda w: sum(1 << i for i in range(16) if w[i] > 0))
    half[np.arange(nt) % 32 >= 16] = -1
    ei += [ballot, per_warp(lambda w: (w > 990).any()), per_warp(lambda w: (w > -1001).all()),
           per_warp(lambda w: (w > 0).all()), half, per_warp(lambda w: w.astype(np.int64).sum()),
           per_warp(np.min), per_warp(np.max), np.full(nt, -1)]
    expected = np.array(ei, dtype=np.int64).astype(np.uint32).view(np.int32)
    for case in range(len(ei)):
        np.testing.assert_array_equal(out["oi"][case], expected[case], err_msg=f"int case {case}")
    np.testing.assert_array_equal(out["of"], np.array(ef))
    np.testing.assert_array_equal(out["od"], np.array(ed))
    np.testing.assert_array_equal(out["ol"], np.array(el))


def test_atomics_across_blocks_and_workers(kernel, rng):
    n = 4099
    keys = rng.integers(0, 10, n).astype(np.int32)
    vals = (rng.integers(-32, 33, n) / 8).astype(np.float32)  # every partial sum is exact: order-free
    sig = {"atomics": (Param("ptr", "int", True), CF32, I32, Param("ptr", "int"), F32, Param("ptr", "int"),
                       Param("ptr", "unsigned int"), F32)}
    bufs = {"keys": keys, "vals": vals, "hist": np.zeros(10, np.int32), "total": np.zeros(1, np.float32),
            "ext": np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0], np.int32),
            "count": np.zeros(1, np.uint32), "fmax": np.array([-np.inf], np.float32)}
    out = run(kernel("atomics.cu"), sig, [Launch("atomics", (cdiv(n, 128), 1, 1), (128, 1, 1), 0,
                                                 ("keys", "vals", n, "hist", "total", "ext", "count", "fmax"))],
              bufs, workers=4)
    np.testing.assert_array_equal(out["hist"], np.bincount(keys, minlength=10))
    assert out["total"][0] == vals.astype(np.float64).sum()
    np.testing.assert_array_equal(out["ext"], [keys.max() * 7 - 50, keys.min() * 7 - 50, 12345])
    assert out["count"][0] == n
    assert out["fmax"][0] == vals.max()


def _special_floats(rng) -> np.ndarray:
    tiny = [2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 3 * 2.0**-25, 2.0**-14, 2.0**-14 - 2.0**-25, 1e-8, 2.0**-126,
            2.0**-149, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-9 + 2.0**-20,
            65504, 65519.99, 65520, 65536, 3.4e38, 0.1, 1 / 3]
    specials = np.array(tiny + [-v for v in tiny] + [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5],
                        dtype=np.float32)
    random_bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(5000) * np.exp2(rng.integers(-30, 20, 5000))).astype(np.float32)
    return np.concatenate([specials, random_bits, scaled])


def _same(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)])
                and np.array_equal(np.signbit(a[~np.isnan(a)]), np.signbit(b[~np.isnan(b)])))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_conversions_round_to_nearest_even_bit_exact(kernel, rng):
    x = _special_floats(rng)
    n = x.size
    sig = {"narrow": (CF32, I32, Param("ptr", "__half"), Param("ptr", "__nv_bfloat16"),
                      Param("ptr", "unsigned int"), F32),
           "widen": (Param("ptr", "__half", True), Param("ptr", "__nv_bfloat16", True), I32, F32, F32),
           "constants": (CF32, F32)}
    every16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    ex2_in = np.linspace(-20, 20, 32, dtype=np.float32)
    bufs = {"x": x, "h": np.zeros(n, np.float16), "b": np.zeros(n, ml_dtypes.bfloat16),
            "packed": np.zeros(2 * n, np.uint32), "unpacked": np.zeros(4 * n, np.float32),
            "h16": every16.view(np.float16), "b16": every16.view(ml_dtypes.bfloat16),
            "hf": np.zeros(65536, np.float32), "bf": np.zeros(65536, np.float32),
            "ex2_in": ex2_in, "consts": np.zeros(36, np.float32)}
    out = run(kernel("convert.cu"), sig, [
        Launch("narrow", (cdiv(n, 256), 1, 1), (256, 1, 1), 0, ("x", n, "h", "b", "packed", "unpacked")),
        Launch("widen", (256, 1, 1), (256, 1, 1), 0, ("h16", "b16", 65536, "hf", "bf")),
        Launch("constants", (1, 1, 1), (32, 1, 1), 0, ("ex2_in", "consts"))], bufs)
    want_h, want_b = x.astype(np.float16), x.astype(ml_dtypes.bfloat16)
    assert _same(out["h"], want_h) and _same(out["b"], want_b)
    finite = ~np.isnan(x)
    assert np.array_equal(out["h"].view(np.uint16)[finite], want_h.view(np.uint16)[finite])
    assert np.array_equal(out["b"].view(np.uint16)[finite], want_b.view(np.uint16)[finite])
    w = x[::-1]
    lo_h, hi_h = out["packed"][0::2] & 0xFFFF, out["packed"][0::2] >> 16
    assert _same(lo_h.astype(np.uint16).view(np.float16), want_h)
    assert _same(hi_h.astype(np.uint16).view(np.float16), w.astype(np.float16))
    lo_b = (out["packed"][1::2] & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16)
    assert _same(lo_b, want_b)
    u = out["unpacked"].reshape(n, 4)
    assert _same(u[:, 0], want_h) and _same(u[:, 1], w.astype(np.float16))
    assert _same(u[:, 2], want_b) and _same(u[:, 3], w.astype(ml_dtypes.bfloat16))
    assert _same(out["hf"], every16.view(np.float16).astype(np.float32))
    assert _same(out["bf"], every16.view(ml_dtypes.bfloat16).astype(np.float32))
    c = out["consts"]
    assert c[0] == np.inf and c[1] == -np.inf and np.isnan(c[2]) and c[3] == ex2_in[0]
    np.testing.assert_allclose(c[4:], np.exp2(ex2_in.astype(np.float64)), rtol=2e-6)
