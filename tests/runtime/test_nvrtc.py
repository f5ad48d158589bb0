"""napkin.runtime.nvrtc: compiling CUDA C with NVRTC from PyPI, no GPU, no driver."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from napkin.diagrams.diagnostics import BackendUnavailable, NapkinError
from napkin.runtime import nvrtc
from napkin.runtime.nvrtc import (
    ALLOWED_ARCHS,
    Compiled,
    CudaCompileError,
    Resources,
    parse_ptxas_report,
)

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed (napkin[nvrtc])")

SMALL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
extern "C" __global__ void scale(float* __restrict__ x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void tile(const float* __restrict__ x, float* __restrict__ y) {
    __shared__ float t[1024];
    t[threadIdx.x] = x[blockIdx.x * 1024 + threadIdx.x];
    __syncthreads();
    y[blockIdx.x * 1024 + threadIdx.x] = t[1023 - threadIdx.x];
}
extern "C" __global__ void halves(__half* x, __nv_bfloat16* y) {
    x[threadIdx.x] = __hadd(x[threadIdx.x], x[0]);
    y[threadIdx.x] = __float2bfloat16(__bfloat162float(y[threadIdx.x]) * 2.0f);
}
"""

# 16 float4s live across a loop: ~90 registers unconstrained, spills under 24.
SPILLY = r"""
extern "C" __global__ void spilly(const float4* __restrict__ x, float4* __restrict__ y, int n) {
    float4 r[16];
    #pragma unroll
    for (int i = 0; i < 16; i++) r[i] = x[threadIdx.x + i * blockDim.x];
    for (int k = 0; k < n; k++) {
        #pragma unroll
        for (int i = 0; i < 16; i++) {
            r[i].x = r[i].x * r[(i + 1) & 15].y + r[i].w;
            r[i].y += r[i].z * r[(i + 3) & 15].x;
            r[i].z -= r[i].x;
            r[i].w *= r[(i + 5) & 15].z;
        }
    }
    #pragma unroll
    for (int i = 0; i < 16; i++) y[threadIdx.x + i * blockDim.x] = r[i];
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

WGMMA = r"""
extern "C" __global__ void wg(float* out) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::);
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::);
    out[threadIdx.x] = 1.0f;
}
"""

BIG_SMEM = r"""
extern "C" __global__ void big(float* x) {
    __shared__ float t[12289];   // 49156 bytes: 4 over the 48 KiB static limit
    t[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = t[12288 - threadIdx.x];
}
"""


# ----------------------------------------------------------- no NVRTC needed


def test_import_is_cheap_and_loads_nothing():
    code = textwrap.dedent("""
        import sys
        import napkin.runtime.nvrtc
        assert "cuda.bindings.nvrtc" not in sys.modules, "binding imported"
        assert "cupy" not in sys.modules
        maps = open("/proc/self/maps").read()
        assert "libnvrtc" not in maps, "libnvrtc loaded at import"
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("arch", ["sm_75", "sm_70", "sm_91", "compute_90", "SM_90", "sm_90 ", "", None, 90])
def test_disallowed_arch_rejected_before_nvrtc(arch, monkeypatch):
    monkeypatch.setattr(nvrtc, "_load", _must_not_load)
    with pytest.raises(NapkinError) as info:
        nvrtc.compile(SMALL, arch=arch)
    assert info.value.code == "N0802"
    assert not isinstance(info.value, BackendUnavailable)
    for allowed in ALLOWED_ARCHS:
        assert allowed in info.value.diagnostics[0].help


@pytest.mark.parametrize("opt", [
    "-G", "-DNAPKIN_TILE=64", "-DFOO", "-I/etc", "--include-path=/etc", "-arch=sm_80",
    "--maxrregcount=15", "--maxrregcount=256", "--maxrregcount=032", "--maxrregcount=x",
    "--fmad=maybe", "-Xptxas=-O0", "--use_fast_math ", "-lineinfo;-G", "",
])
def test_disallowed_option_rejected_before_nvrtc(opt, monkeypatch):
    monkeypatch.setattr(nvrtc, "_load", _must_not_load)
    with pytest.raises(NapkinError) as info:
        nvrtc.compile(SMALL, options=("-lineinfo", opt))
    err = info.value
    assert err.code == "N0803"
    assert len(err.diagnostics) == 1
    assert repr(opt) in err.diagnostics[0].message
    assert "--use_fast_math" in err.diagnostics[0].help


def test_option_validation_reports_all_and_dedupes(monkeypatch):
    monkeypatch.setattr(nvrtc, "_load", _must_not_load)
    with pytest.raises(NapkinError) as info:
        nvrtc.compile(SMALL, options=("-G", "--fmad=true", "--fmad=false", "-DX"))
    assert [d.code for d in info.value.diagnostics] == ["N0803"] * 3
    assert "conflicting" in info.value.diagnostics[1].message
    with pytest.raises(NapkinError):
        nvrtc.compile(SMALL, options="-lineinfo")  # a bare string is not a tuple of options
    assert nvrtc.validate_options(["-lineinfo", "--maxrregcount=16", "-lineinfo"]) == (
        "-lineinfo", "--maxrregcount=16")
    assert nvrtc.validate_options(("--use_fast_math", "--fmad=false", "--maxrregcount=255")) == (
        "--use_fast_math", "--fmad=false", "--maxrregcount=255")


def _must_not_load():
    raise AssertionError("NVRTC was touched before validation")


def test_missing_wheels_is_backend_unavailable(monkeypatch):
    monkeypatch.setattr(nvrtc, "_backend", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)  # import now raises ImportError
    assert nvrtc.available() is False
    with pytest.raises(BackendUnavailable) as info:
        nvrtc.compile(SMALL, arch="sm_80")
    err = info.value
    assert err.code == "N0901" and err.exit_code == 3
    assert err.diagnostics[0].help == "pip install 'napkin[nvrtc]'"
    with pytest.raises(BackendUnavailable):
        nvrtc.version()
    # Validation still comes first, even with NVRTC missing.
    with pytest.raises(NapkinError) as info:
        nvrtc.compile(SMALL, arch="sm_75")
    assert info.value.code == "N0802"


def test_missing_headers_is_backend_unavailable(monkeypatch):
    monkeypatch.setattr(nvrtc, "_backend", None)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)
    monkeypatch.setattr(nvrtc, "_nvidia_roots", lambda: [])
    with pytest.raises(BackendUnavailable) as info:
        nvrtc.compile(SMALL)
    assert "header" in info.value.diagnostics[0].message


def test_parse_ptxas_report_formats():
    log = textwrap.dedent("""\
        ptxas warning : For profile sm_80 adjusting per thread register count of 16 to lower bound of 24
        ptxas info    : 0 bytes gmem
        ptxas info    : Compiling entry function 'k' for 'sm_80'
        ptxas info    : Function properties for k
        ptxas         .     448 bytes stack frame, 796 bytes spill stores, 820 bytes spill loads
        ptxas info    : Used 24 registers, used 1 barriers, 512 bytes cumulative stack size, 4096 bytes smem, 372 bytes cmem[0], 8 bytes cmem[2]
        ptxas info    : Compile time = 11.941 ms
        ptxas info    : Function properties for _Z6helperPfi
        ptxas         .     16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
        ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
        ptxas info    : Function properties for _Z3fooPf
        ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 10 registers, used 0 barriers
    """)
    res = parse_ptxas_report(log)
    assert res == {
        "k": Resources(registers=24, spill_stores=796, spill_loads=820, stack_bytes=512,
                       smem_bytes=4096, cmem_bytes=380, barriers=1),
        "_Z3fooPf": Resources(registers=10),
    }
    assert res["k"].spills and not res["_Z3fooPf"].spills
    assert parse_ptxas_report("") == {}


# ---------------------------------------------------------------- with NVRTC


@needs_nvrtc
def test_version():
    major, minor = nvrtc.version()
    assert major >= 12 and minor >= 0


@needs_nvrtc
@pytest.mark.parametrize("arch", ALLOWED_ARCHS)
def test_small_kernel_compiles_for_every_arch(arch):
    out = nvrtc.compile(SMALL, arch=arch)
    assert isinstance(out, Compiled) and out.arch == arch and out.options == ()
    for k in ("scale", "tile", "halves"):
        assert f".entry {k}(" in out.ptx
        assert out.resources[k].registers > 0
    assert out.kernels == ("scale", "tile", "halves")
    assert out.cubin is not None and out.cubin[:4] == b"\x7fELF"
    assert f"'{arch}'" in out.log  # ptxas report present
    tile = out.resources["tile"]
    assert tile.smem_bytes == 4096 and tile.barriers == 1 and not tile.spills
    assert out.resources["scale"].smem_bytes == 0
    target = arch.removeprefix("sm_")
    assert f".target sm_{target}" in out.ptx


@needs_nvrtc
def test_ptx_only_skips_ptxas():
    out = nvrtc.compile(SMALL, arch="sm_90a", want_cubin=False)
    assert out.cubin is None and out.resources == {}
    assert out.kernels == ("scale", "tile", "halves")
    # ptxas errors go unseen without a cubin: this is the documented trade-off.
    assert nvrtc.compile(BIG_SMEM, arch="sm_90", want_cubin=False).cubin is None


@needs_nvrtc
def test_options_reach_nvrtc():
    plain = nvrtc.compile(SMALL, arch="sm_80")
    lined = nvrtc.compile(SMALL, arch="sm_80", options=("-lineinfo", "--use_fast_math", "--fmad=true"))
    assert lined.options == ("-lineinfo", "--use_fast_math", "--fmad=true")
    assert ".loc" in lined.ptx and ".loc" not in plain.ptx


@needs_nvrtc
def test_spills_detected_under_maxrregcount():
    free = nvrtc.compile(SPILLY, arch="sm_80").resources["spilly"]
    assert free.registers > 32 and not free.spills
    tight = nvrtc.compile(SPILLY, arch="sm_80", options=("--maxrregcount=16",))
    r = tight.resources["spilly"]
    # ptxas raises 16 to sm_80's floor of 24 registers, with a warning.
    assert r.registers <= 24
    assert r.spills and r.spill_stores > 0 and r.spill_loads > 0 and r.stack_bytes > 0


@needs_nvrtc
def test_cp_async_needs_sm80():
    out = nvrtc.compile(CP_ASYNC, arch="sm_80")
    assert "cp.async.cg.shared.global" in out.ptx
    assert out.resources["cpa"].smem_bytes == 2048
    # Below sm_80 is outside the allowlist; the private entry point shows ptxas's guard.
    with pytest.raises(CudaCompileError) as info:
        nvrtc._compile_unchecked(CP_ASYNC, arch="sm_75")
    assert "cp.async" in info.value.log and "sm_80" in info.value.log


@needs_nvrtc
def test_wgmma_needs_sm90a():
    assert nvrtc.compile(WGMMA, arch="sm_90a").cubin
    for arch in ("sm_90", "sm_100a"):
        with pytest.raises(CudaCompileError) as info:
            nvrtc.compile(WGMMA, arch=arch)
        assert "wgmma" in info.value.log
        assert info.value.arch == arch


@needs_nvrtc
def test_static_smem_over_48k_is_compile_error():
    with pytest.raises(CudaCompileError) as info:
        nvrtc.compile(BIG_SMEM, arch="sm_90")
    err = info.value
    assert isinstance(err, RuntimeError)
    assert "too much shared data" in err.log
    assert err.log in str(err)
    assert err.source == BIG_SMEM and err.name == "napkin.cu"


@needs_nvrtc
def test_front_end_error_carries_full_log():
    src = 'extern "C" __global__ void bad(float* x) { x[0] = INFINITY + missing_thing; }'
    with pytest.raises(CudaCompileError) as info:
        nvrtc.compile(src, arch="sm_80", name="gen_bad.cu")
    log = info.value.log
    assert "gen_bad.cu(1)" in log and "INFINITY" in log and "missing_thing" in log
    assert "2 errors detected" in log


@needs_nvrtc
def test_compile_is_thread_safe(monkeypatch):
    monkeypatch.setattr(nvrtc, "_backend", None)  # race the lazy load too
    archs = ["sm_80", "sm_90", "sm_90a", "sm_120"] * 2
    with ThreadPoolExecutor(max_workers=8) as pool:
        outs = list(pool.map(lambda a: nvrtc.compile(SMALL, arch=a), archs))
    for arch, out in zip(archs, outs):
        assert out.arch == arch and out.resources["tile"].smem_bytes == 4096
    assert outs[0].cubin == outs[4].cubin  # deterministic
