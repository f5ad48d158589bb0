"""A hand-written FlashAttention-2 kernel on tensor cores (kernels/flash_mma.cu), run on the
CPU emulator against the float64 reference, and compiled by NVRTC for sm_80/sm_90 without
spills. It is the target of the tensor-core lowering (docs/tensor-cores.md): the emulator
runs every warp collective it needs (ldmatrix, ldmatrix.trans, mma.m16n8k16, quad shuffles)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.runtime import nvrtc
from napkin.runtime.emulate import Launch, Param, run

H, OUT = Param("ptr", "__half", const=True), Param("ptr", "__half")
SIG = {"flash_mma": (H, H, H, OUT, Param("i64", ""), Param("i64", ""), Param("i64", ""),
                     Param("i32", ""))}
SMEM = 3 * 64 * 72 * 2


@pytest.mark.parametrize("bh,nq,nx,causal", [(3, 77, 130, 0), (2, 64, 64, 0), (2, 130, 130, 1),
                                             (1, 5, 1, 0)])
def test_flash_mma_matches_the_reference(kernel, rng, bh, nq, nx, causal):
    Q, K, V = (rng.standard_normal((1, bh, n, 64)).astype(np.float16) for n in (nq, nx, nx))
    O = np.full((bh, nq, 64), np.nan, np.float16)
    blocks = min(bh * -(-nq // 64), 5)      # fewer blocks than tiles: the grid-stride loop
    out = run(kernel("flash_mma.cu"), SIG,
              [Launch("flash_mma", (blocks, 1, 1), (128, 1, 1), SMEM,
                      ("Q", "K", "V", "O", nq, nx, bh, causal))],
              {"Q": Q[0], "K": K[0], "V": V[0], "O": O})["O"].astype(np.float64)
    (ref,) = napkin.run("causal_attention" if causal else "attention", Q, K, V)
    ref = ref[0].astype(np.float64)
    assert not np.isnan(out).any()
    # f16 probabilities into the second product: within a few f16 ulps of |O| <= max|V|
    assert np.abs(out - ref).max() < 4e-3, np.abs(out - ref).max()


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_flash_mma_compiles_without_spills(kernel, arch, compiled):
    res = compiled(kernel("flash_mma.cu"), arch).resources["flash_mma"]
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= 255
