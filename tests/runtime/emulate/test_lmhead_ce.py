"""A hand-written LM head fused with its cross-entropy on tensor cores (kernels/lmhead_ce.cu):
the kernel compiler/epilogue_stats.py prices and the lowering should emit. Z = H W^T stays in
C fragments; each 64 x 64 tile is reduced over v in the epilogue (quad shuffles, shared
memory across the 2 warps along v) into partial states per row (the tile's logsumexp, the
label's logit), merged like a split of v. Run on the CPU emulator against a float64 NumPy
oracle at sizes next to tile multiples (t, m, v; labels at the first and last column; v under
one tile), f16 and bf16; compiled by NVRTC for sm_80/sm_90 without spills."""

from __future__ import annotations

import numpy as np
import pytest

from napkin.runtime import nvrtc
from napkin.runtime.dtypes import numpy_dtype
from napkin.runtime.emulate import Launch, Param, run

from .conftest import KERNELS

TILING = (64, 64, 32, 2, 2)          # the kernel's own: BM, BN, BK, WM, WN
CTYPE = {"f16": "__half", "bf16": "__nv_bfloat16"}
F32, CF32 = Param("ptr", "float"), Param("ptr", "float", const=True)
I64 = Param("i64", "")


def _signatures(dt: str) -> dict:
    op = Param("ptr", CTYPE[dt], const=True)
    return {f"lmhead_ce_parts_{dt}": (op, op, Param("ptr", "int", const=True), F32, F32,
                                      I64, I64, I64),
            "lmhead_ce_merge": (CF32, CF32, F32, I64, I64)}


def _source(prelude, tiling) -> str:
    """The kernel at a tiling (BM x BN block tiles, chunks of BK, WM x WN warps)."""
    if tiling == TILING:
        return prelude + "\n" + (KERNELS / "lmhead_ce.cu").read_text()
    defines = "".join(f"#define {k} {v}\n" for k, v in zip(("BM", "BN", "BK", "WM", "WN"), tiling))
    return prelude + "\n" + defines + (KERNELS / "lmhead_ce.cu").read_text()


def _oracle(H, W, label, BN):
    """(L, the tiles' logsumexps [P][t], the tiles' label logits [P][t]) in float64."""
    z = H.astype(np.float64) @ W.astype(np.float64).T
    t, v = z.shape
    parts = -(-v // BN)
    lse, sel = np.empty((parts, t)), np.zeros((parts, t))
    for p in range(parts):
        tile = z[:, p * BN:(p + 1) * BN]
        top = tile.max(axis=1)
        lse[p] = np.log(np.exp(tile - top[:, None]).sum(axis=1)) + top
        inside = (label >= p * BN) & (label < p * BN + tile.shape[1])
        sel[p, inside] = z[np.arange(t), label][inside]
    top = z.max(axis=1)
    L = np.log(np.exp(z - top[:, None]).sum(axis=1)) + top - z[np.arange(t), label]
    return L, lse, sel


def _run(prelude, dt, t, m, v, seed, blocks=None, tiling=TILING):
    BM, BN, BK, WM, WN = tiling
    smem = (BM + BN) * (BK + 8) * 2 + 3 * WN * BM * 4    # operand tiles, 3 statistics a warp
    rng = np.random.default_rng(seed)
    store = numpy_dtype(dt)
    H = (rng.standard_normal((t, m)) * 0.5).astype(np.float32).astype(store)
    W = (rng.standard_normal((v, m)) * 0.5).astype(np.float32).astype(store)
    label = rng.integers(0, v, t).astype(np.int32)
    label[0], label[-1] = 0, v - 1                  # the first and the last column
    parts, tiles = -(-v // BN), -(-t // BM) * -(-v // BN)
    grid = min(tiles, blocks or tiles)              # fewer blocks than tiles: the stride loop
    nan = np.full((parts, t), np.nan, np.float32)
    out = run(_source(prelude, tiling), _signatures(dt),
              [Launch(f"lmhead_ce_parts_{dt}", (grid, 1, 1), (32 * WM * WN, 1, 1), smem,
                      ("H", "W", "label", "lse", "sel", t, m, v)),
               Launch("lmhead_ce_merge", (-(-t // 32), 1, 1), (32, 1, 1), 0,
                      ("lse", "sel", "L", t, parts))],
              {"H": H, "W": W, "label": label, "lse": nan, "sel": nan.copy(),
               "L": np.full(t, np.nan, np.float32)})
    return out, _oracle(H, W, label, BN)


def _close(got, want, tol):
    got = np.asarray(got, np.float64)
    assert not np.isnan(got).any(), "every partial state and output must be written"
    err = np.abs(got - want).max()
    assert err <= tol * max(1.0, np.abs(want).max()), err


@pytest.mark.parametrize("dt, t, m, v, blocks, tiling", [("f16", 19, 37, 71, 3, TILING)] + [
    pytest.param(*c, marks=pytest.mark.thorough) for c in
    [("bf16", 19, 37, 71, None, TILING), ("f16", 65, 130, 129, 5, TILING),
     ("bf16", 2, 16, 1, None, TILING), ("f16", 64, 64, 64, None, TILING),
     ("bf16", 70, 33, 200, 4, TILING),
     # the planner's warp layout (4 x 2 warps, 32 x 32 warp tiles), and 4 warps along v
     ("f16", 130, 48, 150, None, (128, 64, 16, 4, 2)), ("bf16", 33, 40, 270, 3, (32, 128, 32, 1, 4))]])
def test_fused_lm_head_cross_entropy_matches_float64(prelude, dt, t, m, v, blocks, tiling):
    out, (L, lse, sel) = _run(prelude, dt, t, m, v, t * 1000 + v, blocks, tiling)
    # f32 accumulation of exact 16-bit products: the statistics within f32 roundings of |Z|
    _close(out["lse"], lse, 1e-5)
    _close(out["sel"], sel, 1e-5)
    _close(out["L"], L, 1e-5)


def test_partial_states_keep_the_label_in_its_own_tile_only(prelude):
    out, (_, _, sel) = _run(prelude, "f16", 5, 16, 130, 7)
    # each row's label lies in exactly one of the 3 tiles; the others hold 0 exactly
    assert ((out["sel"] == 0.0).sum(axis=0) == 2).all() and ((sel == 0.0).sum(axis=0) == 2).all()


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_fused_lm_head_cross_entropy_compiles_without_spills(kernel, arch, compiled):
    res = compiled(kernel("lmhead_ce.cu"), arch).resources
    for name in ("lmhead_ce_parts_f16", "lmhead_ce_parts_bf16", "lmhead_ce_merge"):
        assert res[name].spill_stores == 0 and res[name].spill_loads == 0, (name, res[name])
