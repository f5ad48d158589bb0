"""The GPU side of the wgmma helpers (codegen/wgmma_ptx.py): the emulator tests' kernels
(tests/runtime/emulate/kernels/wgmma.cu) compile with NVRTC, ptxas accepts the PTX for
sm_90a, and the cubin holds one HGMMA.64xNx16 shape per product (static SASS)."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

import pytest

from napkin.codegen import wgmma_ptx
from napkin.diagrams.diagnostics import BackendUnavailable
from napkin.runtime import nvrtc, sass

KERNEL = Path(__file__).parents[1] / "runtime" / "emulate" / "kernels" / "wgmma.cu"
VARIANTS = [wgmma_ptx.Variant(8), wgmma_ptx.Variant(64, tb=True), wgmma_ptx.Variant(64, ta=True, tb=True),
            wgmma_ptx.Variant(136, "bf16"), wgmma_ptx.Variant(256, "bf16", tb=True), wgmma_ptx.Variant(128)]
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed (napkin[nvrtc])")


def _has_tools() -> bool:
    try:
        sass.find_tool("cuobjdump")
    except BackendUnavailable:
        return False
    return True


def source() -> str:
    prelude = (files("napkin.codegen") / "prelude" / "napkin.cuh").read_text()
    return prelude + "\n" + wgmma_ptx.helpers(VARIANTS) + KERNEL.read_text()


def test_wrapper_text():
    v = wgmma_ptx.Variant(24, "bf16", tb=True)
    text = wgmma_ptx.wrapper(v)
    assert v.name == "napkin_wgmma_m64n24k16_bf16_tb"
    assert "float (&d)[12]" in text and '"+f"(d[11])' in text and '"+f"(d[12])' not in text
    assert "m64n24k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, %12, %13, p, 1, 1, 0, 1;" in text
    assert "setp.ne.b32 p, %14, 0" in text
    with pytest.raises(ValueError):
        wgmma_ptx.Variant(260)
    # one wrapper per variant, however often it is asked for
    assert wgmma_ptx.helpers([v, v, wgmma_ptx.Variant(8)]).count("__device__ __forceinline__ void napkin_wgmma_m64") == 2


@needs_nvrtc
def test_helpers_compile_for_sm90a_and_guard_other_targets():
    out = nvrtc.compile(source(), arch="sm_90a")
    assert out.cubin and "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in out.ptx
    for arch in ("sm_90", "sm_80"):   # no wgmma there: the wrappers trap, ptxas sees none
        assert "wgmma.mma_async" not in nvrtc.compile(source(), arch=arch).ptx


@pytest.mark.thorough
@needs_nvrtc
@pytest.mark.skipif(not _has_tools(), reason="cuobjdump wheel not installed (napkin[test])")
def test_sass_holds_each_hgmma_shape():
    ops = sass.opcodes(nvrtc.compile(source(), arch="sm_90a").cubin, modifiers=True)
    shapes = {m.group(1) for op in ops for m in [re.match(r"HGMMA\.64x(\d+)x16", op)] if m}
    assert shapes == {str(v.n) for v in VARIANTS}, ops
