"""The prelude's inline-PTX helpers, instruction by instruction, on the CPU emulator.

Test kernels load and store fragments exactly as the PTX ISA's layout tables say;
expected values are computed here from the same tables, independently of the
emulator's implementation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from napkin.runtime.emulate import Launch, Param, run

F32, CF32 = Param("ptr", "float"), Param("ptr", "float", const=True)
CF16, CBF16 = Param("ptr", "__half", const=True), Param("ptr", "__nv_bfloat16", const=True)
U32 = Param("ptr", "unsigned int")
I32 = Param("i32", "")


# One signature table per kernel file, so that each file is built once.
MMA_SIG = {"mma_f16": (CF16, CF16, CF32, F32), "mma_bf16": (CBF16, CBF16, CF32, F32),
           "mma_tf32": (CF32, CF32, CF32, F32)}
LDM_SIG = {f"ldm_x{n}{t}": (CF16, U32) for n in (1, 2, 4) for t in ("", "_trans")}
CP_SIG = {"cp_async_stage": (CF32, I32, F32, F32, F32), "cp_async_nowait": (CF32, F32),
          "cp_async_small": (CF32, F32), "cp_async_nobarrier": (CF32, F32)}


def _check_product(D, A, B, C):
    """D == A @ B + C up to float32 accumulation (bound relative to the sum of |terms|)."""
    a, b = A.astype(np.float64), B.astype(np.float64)
    ref = a @ b + C
    scale = np.abs(a) @ np.abs(b) + np.abs(C)
    assert not np.isnan(D).any()
    err = np.abs(D - ref)
    assert (err <= 2.0**-18 * scale + 1e-30).all(), err.max()


@pytest.mark.parametrize("name,dtype", [("mma_f16", np.float16), ("mma_bf16", ml_dtypes.bfloat16)])
def test_mma_m16n8k16(kernel, rng, name, dtype):
    P = 4  # two blocks of two warps, one problem per warp
    A = rng.standard_normal((P, 16, 16)).astype(dtype)
    B = rng.standard_normal((P, 16, 8)).astype(dtype)
    C = rng.standard_normal((P, 16, 8)).astype(np.float32)
    out = run(kernel("mma.cu"), MMA_SIG,
              [Launch(name, (2, 1, 1), (64, 1, 1), 0, ("A", "B", "C", "D"))],
              {"A": A, "B": B, "C": C, "D": np.full((P, 16, 8), np.nan, np.float32)})
    _check_product(out["D"], A, B, C)


def test_mma_m16n8k8_tf32(kernel, rng):
    P = 4
    to_tf32 = lambda x: (x.astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32)  # noqa: E731
    A, B = to_tf32(rng.standard_normal((P, 16, 8))), to_tf32(rng.standard_normal((P, 8, 8)))
    C = rng.standard_normal((P, 16, 8)).astype(np.float32)
    out = run(kernel("mma.cu"), MMA_SIG,
              [Launch("mma_tf32", (2, 1, 1), (64, 1, 1), 0, ("A", "B", "C", "D"))],
              {"A": A, "B": B, "C": C, "D": np.full((P, 16, 8), np.nan, np.float32)})
    _check_product(out["D"], A, B, C)


def _ldmatrix_expected(tile: np.ndarray, num: int, trans: bool) -> np.ndarray:
    """Registers per lane from the ldmatrix description: lanes 8m..8m+7 give the rows of
    matrix m; lane t receives row t/4, columns 2(t%4), 2(t%4)+1 (with .trans: column t/4
    of rows 2(t%4) and 2(t%4)+1), the lower column/row in the low 16 bits."""
    bits = tile.view(np.uint16).astype(np.uint32)
    mats = []
    for m in range(num):
        rows = [(5 * (8 * m + r)) % 32 for r in range(8)]  # lane 8m+r's row, as the kernel picks it
        col = 8 * (m % 2)
        mats.append(bits[rows, col:col + 8])
    out = np.full((32, 4), 0xDEADBEEF, np.uint32)
    for t in range(32):
        for m in range(num):
            if trans:
                lo, hi = mats[m][2 * (t % 4), t // 4], mats[m][2 * (t % 4) + 1, t // 4]
            else:
                lo, hi = mats[m][t // 4, 2 * (t % 4)], mats[m][t // 4, 2 * (t % 4) + 1]
            out[t, m] = lo | (hi << 16)
    return out


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_layout(kernel, rng, num, trans):
    name = f"ldm_x{num}" + ("_trans" if trans else "")
    tile = rng.integers(0, 2**16, (32, 24)).astype(np.uint16).view(np.float16)
    out = run(kernel("ldmatrix.cu"), LDM_SIG, [Launch(name, (1, 1, 1), (32, 1, 1), 0, ("src", "out"))],
              {"src": tile, "out": np.full((32, 4), 0xDEADBEEF, np.uint32)})
    np.testing.assert_array_equal(out["out"], _ldmatrix_expected(tile, num, trans))


def test_ldmatrix_feeds_mma(kernel, rng):
    P = 3
    A = rng.standard_normal((P, 16, 16)).astype(np.float16)
    B = rng.standard_normal((P, 16, 8)).astype(np.float16)
    out = run(kernel("ldmatrix_mma.cu"), {"ldmatrix_mma": (CF16, CF16, F32)},
              [Launch("ldmatrix_mma", (P, 1, 1), (32, 1, 1), 0, ("A", "B", "D"))],
              {"A": A, "B": B, "D": np.full((P, 16, 8), np.nan, np.float32)})
    _check_product(out["D"], A, B, np.zeros((P, 16, 8)))


@pytest.mark.parametrize("sanitize", ["none", "address"])
def test_cp_async_zero_fills_tails_and_lands_at_wait_group(kernel, rng, sanitize):
    n, nt = 1003, 32  # the last chunk has 3 floats: src-size 12 of 16, nothing read past x
    blocks = -(-n // (8 * nt))
    x = rng.standard_normal(n).astype(np.float32)
    padded = np.zeros(blocks * 8 * nt, np.float32)
    padded[:n] = x
    bufs = {"x": x, "early": np.zeros(blocks * nt * 4, np.float32), "late": np.zeros(blocks * nt * 4, np.float32),
            "out": np.full(blocks * 8 * nt, np.nan, np.float32)}
    out = run(kernel("cp_async.cu"), CP_SIG,
              [Launch("cp_async_stage", (blocks, 1, 1), (nt, 1, 1), 8 * nt * 4, ("x", n, "early", "late", "out"))],
              bufs, sanitize=sanitize)
    np.testing.assert_array_equal(out["out"], padded)  # data, then zero-filled tail
    group0 = padded.reshape(blocks, 2, nt * 4)[:, 0].reshape(-1)
    np.testing.assert_array_equal(out["early"], group0)
    # Group 1 was not waited for: in the emulator its copies have not landed, so the
    # thread saw shared memory's poison (NaN), as a kernel that forgets the wait would.
    assert np.isnan(out["late"]).all()


def test_cp_async_8_and_4_byte_partial_sources(kernel, rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = run(kernel("cp_async.cu"), CP_SIG,
              [Launch("cp_async_small", (1, 1, 1), (64, 1, 1), 0, ("x", "out"))],
              {"x": x, "out": np.full(256, np.nan, np.float32)})
    t = np.arange(64)
    want = np.zeros((64, 4), np.float32)
    xs = x.reshape(64, 4)
    want[:, 0] = np.where(t % 3 >= 1, xs[:, 0], 0)
    want[:, 1] = np.where(t % 3 == 2, xs[:, 1], 0)
    want[:, 2] = np.where(t % 2 == 1, xs[:, 2], 0)
    want[:, 3] = -1
    np.testing.assert_array_equal(out["out"].reshape(64, 4), want)


def test_missing_cp_async_wait_gives_wrong_data(kernel, rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = run(kernel("cp_async.cu"), CP_SIG,
              [Launch("cp_async_nowait", (2, 1, 1), (32, 1, 1), 32 * 16, ("x", "out"))],
              {"x": x, "out": np.zeros(256, np.float32)})
    assert np.isnan(out["out"]).all(), "without wait_group the neighbour's chunk must not have landed"
