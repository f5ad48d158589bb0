"""napkin.runtime.sass: the instructions we rely on are really in the cubin."""

from __future__ import annotations

import pytest

from napkin.diagrams.diagnostics import BackendUnavailable
from napkin.runtime import nvrtc, sass

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed (napkin[nvrtc])")


def _has_tools() -> bool:
    try:
        sass.find_tool("cuobjdump")
        sass.find_tool("nvdisasm")
    except BackendUnavailable:
        return False
    return True


needs_tools = pytest.mark.skipif(not _has_tools(), reason="cuobjdump/nvdisasm wheels not installed (napkin[test])")

MMA = r"""
extern "C" __global__ void mma(const unsigned* a, const unsigned* b, float* c) {
    const unsigned* pa = a + threadIdx.x * 4;
    const unsigned* pb = b + threadIdx.x * 2;
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(pa[0]), "r"(pa[1]), "r"(pa[2]), "r"(pa[3]), "r"(pb[0]), "r"(pb[1]));
    float v = d0 + d1 + d2 + d3;
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    c[threadIdx.x] = v;
}
"""

CP_ASYNC = r"""
extern "C" __global__ void cpa(const float4* __restrict__ g, float4* __restrict__ out) {
    __shared__ __align__(16) float4 s[128];
    unsigned saddr = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(saddr), "l"(g + threadIdx.x));
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    out[threadIdx.x] = s[127 - threadIdx.x];
}
"""


@pytest.fixture(scope="module")
def mma_cubin():
    return nvrtc.compile(MMA, arch="sm_90").cubin


@pytest.fixture(scope="module")
def cpa_cubin():
    return nvrtc.compile(CP_ASYNC, arch="sm_80").cubin


@needs_nvrtc
@needs_tools
@pytest.mark.parametrize("tool", ["cuobjdump", "nvdisasm"])
def test_mma_sync_becomes_hmma(mma_cubin, tool):
    ops = sass.opcodes(mma_cubin, tool=tool)
    assert ops["HMMA"] == 1 and ops["SHFL"] == 1 and ops["EXIT"] >= 1
    full = sass.opcodes(mma_cubin, modifiers=True, tool=tool)
    assert full["HMMA.16816.F32"] == 1
    assert "mma" in sass.disassemble(mma_cubin, tool=tool)


@needs_nvrtc
@needs_tools
def test_cp_async_becomes_ldgsts(cpa_cubin):
    ops = sass.opcodes(cpa_cubin)
    assert ops["LDGSTS"] == 1 and ops["LDGDEPBAR"] == 1 and ops["BAR"] == 1
    assert "HMMA" not in ops


@needs_nvrtc
@needs_tools
def test_one_byte_short_cubin_is_repaired(cpa_cubin):
    # NVRTC's cubin is exactly its ELF extent; CuPy's getCUBIN once lost the last byte.
    assert sass.cubin_extent(cpa_cubin) == len(cpa_cubin)
    short = cpa_cubin[:-1]
    assert sass.repair_cubin(short) == cpa_cubin
    assert sass.opcodes(short)["LDGSTS"] == 1
    with pytest.raises(ValueError):
        sass.repair_cubin(cpa_cubin[: len(cpa_cubin) // 2])
    with pytest.raises(ValueError):
        sass.disassemble(b"not an elf at all" * 8)


def test_count_opcodes_parses_both_formats():
    text = """
        /*0080*/                   LDGSTS.E.BYPASS.128 [R7], [R2.64] ;              /* 0x0000000002077fae */
                                                                                    /* 0x000fe8000b901c44 */
        /*0090*/              @!P0 BRA 0x120 ;
        /*00a0*/               @P1 SHFL.BFLY PT, R9, R10, 0x1, 0x1f ;
        /*00b0*/                   HMMA.16816.F32 R8, R8, R6, RZ ;
        /*00c0*/                   EXIT ;
    """
    assert sass.count_opcodes(text) == {"LDGSTS": 1, "BRA": 1, "SHFL": 1, "HMMA": 1, "EXIT": 1}
    assert sass.count_opcodes(text, modifiers=True)["SHFL.BFLY"] == 1


def test_missing_tools_is_backend_unavailable(monkeypatch):
    monkeypatch.setattr(sass, "_locate", lambda tool: None)
    with pytest.raises(BackendUnavailable) as info:
        sass.disassemble(b"\x7fELF" + b"\x02\x01" + b"\0" * 58)
    assert info.value.code == "N0901" and "napkin[test]" in info.value.diagnostics[0].help


@needs_nvrtc
@needs_tools
def test_a_cubin_read_again_is_not_disassembled_again(cpa_cubin, monkeypatch):
    """The text of a cubin disassembled before is kept (sass._disassembled): the tool runs once
    for it, the text is the same, another cubin or tool runs it again, a failure is not kept."""
    runs = []
    real = sass.subprocess.run
    monkeypatch.setattr(sass.subprocess, "run", lambda argv, **kw: runs.append(argv) or real(argv, **kw))
    sass._disassembled.cache_clear()
    first = sass.disassemble(cpa_cubin)
    assert sass.disassemble(bytearray(cpa_cubin)) == first and len(runs) == 1
    assert sass.disassemble(cpa_cubin[:-1]) == first and len(runs) == 1    # (repaired: the same)
    assert "LDGSTS" in sass.disassemble(cpa_cubin, tool="nvdisasm") and len(runs) == 2
    broken = cpa_cubin[:64] + bytes(len(cpa_cubin) - 64)      # (no sections: the tool fails)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            sass.disassemble(broken)
    assert len(runs) == 4          # (the tool ran for each: the failure was not kept)
