"""napkin.runtime.emulate.run as an API: every test kernel also compiles with NVRTC,
arguments and launch limits are checked, g++ errors and a missing g++ are reported,
builds are cached, launches run in order and inputs are left alone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import napkin.runtime.emulate.build as emulate_build
from napkin.diagrams.diagnostics import BackendUnavailable
from napkin.runtime import nvrtc
from napkin.runtime.emulate import EmulatorError, Launch, Param, run, store

F32, CF32 = Param("ptr", "float"), Param("ptr", "float", const=True)
I32 = Param("i32", "")
TAIL_SIG = {"scale_guarded": (CF32, F32, I32), "scale_unguarded": (CF32, F32, I32)}

# Instructions ptxas must have been given for the kernels that use the prelude's PTX helpers.
EXPECTED_PTX = {"mma.cu": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                           "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                           "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
                "ldmatrix.cu": ("ldmatrix.sync.aligned.m8n8.x1.shared.b16",
                                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
                "ldmatrix_mma.cu": ("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",),
                "cp_async.cu": ("cp.async.cg.shared.global", "cp.async.ca.shared.global",
                                "cp.async.wait_group 1", "cp.async.commit_group"),
                "convert.cu": ("ex2.approx.ftz.f32",)}


def _kernel_files():
    return sorted(p.name for p in (Path(__file__).parent / "kernels").glob("*.cu"))


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (pip install 'napkin[nvrtc]') is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
# (wgmma.cu needs the helpers codegen/wgmma_ptx.py prints after the prelude: its NVRTC builds,
# sm_90a, sm_90 and sm_80, are tests/codegen/test_wgmma_ptx.py's)
@pytest.mark.parametrize("name", [n for n in _kernel_files() if n != "wgmma.cu"])
def test_every_test_kernel_compiles_with_nvrtc(kernel, name, arch, compiled):
    compiled = compiled(kernel(name), arch)
    assert compiled.cubin and compiled.kernels
    for instruction in EXPECTED_PTX.get(name, ()):
        assert instruction in compiled.ptx, instruction
    assert not any(r.spills for r in compiled.resources.values())


def _scale(kernel, launches, x, **kw):
    return run(kernel("tail_read.cu"), TAIL_SIG, launches, {"x": x, "y": np.zeros_like(x)}, **kw)


def test_launches_run_in_order_and_inputs_are_untouched(kernel, rng):
    n = 130
    x = rng.standard_normal(n).astype(np.float32)
    x_before = x.copy()
    grid = (-(-n // 64), 1, 1)
    out = _scale(kernel, [Launch("scale_guarded", grid, (64, 1, 1), 0, ("x", "y", n)),
                          Launch("scale_guarded", grid, (64, 1, 1), 0, ("y", "x", n))], x, workers=1)
    pair = lambda v: v + np.append(v, np.float32(0))[np.arange(n) ^ 1]  # noqa: E731
    np.testing.assert_array_equal(out["y"], pair(x))
    np.testing.assert_array_equal(out["x"], pair(pair(x)))
    np.testing.assert_array_equal(x, x_before)
    assert out["x"] is not x and out["x"].dtype == np.float32 and out["x"].shape == (n,)


@pytest.mark.parametrize("grid,block,smem,expected", [
    ((1, 1, 1), (1025, 1, 1), 0, "block (1025,1,1) (at most 1024 threads"),
    ((1, 1, 1), (32, 32, 2), 0, "block (32,32,2) (at most 1024 threads"),
    ((1, 1, 1), (1, 1, 65), 0, "block (1,1,65)"),
    ((1, 65536, 1), (64, 1, 1), 0, "grid (1,65536,1)"),
    ((0, 1, 1), (64, 1, 1), 0, "grid (0,1,1)"),
    ((1, 1, 1), (64, 1, 1), 232449, "232449 bytes of dynamic shared memory exceed the limit of 232448"),
])
def test_launch_limits_are_checked(kernel, grid, block, smem, expected):
    with pytest.raises(EmulatorError) as exc:
        _scale(kernel, [Launch("scale_guarded", grid, block, smem, ("x", "y", 64))], np.ones(64, np.float32))
    assert exc.value.kind == "fault"
    assert exc.value.headline.startswith("invalid launch of scale_guarded: ")
    assert expected in exc.value.headline


def test_smem_limit_is_a_parameter(kernel):
    x = np.ones(64, np.float32)
    launch = Launch("scale_guarded", (1, 1, 1), (64, 1, 1), 1024, ("x", "y", 64))
    _scale(kernel, [launch], x, smem_limit=1024)
    with pytest.raises(EmulatorError, match="1024 bytes of dynamic shared memory exceed the limit of 1023"):
        _scale(kernel, [launch], x, smem_limit=1023)


@pytest.mark.parametrize("change,expected", [
    (dict(args=("x", "nope", 64)), "argument 1 must name a buffer"),
    (dict(args=("x", "y")), "takes 3 arguments, the launch gives 2"),
    (dict(args=("x", "y", 2.5)), "argument 2 (i32) must be an int"),
    (dict(args=("x", "y", 2**31)), "out of range"),
    (dict(kernel="missing"), "launch of 'missing', which has no signature"),
    (dict(grid=(1, 1)), "grid must be a tuple of three non-negative ints"),
    (dict(smem_bytes=-1), "smem_bytes must be a non-negative int"),
])
def test_bad_arguments_are_rejected(kernel, change, expected):
    fields = dict(kernel="scale_guarded", grid=(1, 1, 1), block=(64, 1, 1), smem_bytes=0, args=("x", "y", 64))
    fields.update(change)
    with pytest.raises(EmulatorError) as exc:
        _scale(kernel, [Launch(**fields)], np.ones(64, np.float32))
    assert exc.value.kind == "arguments" and exc.value.code == "N0902"
    assert expected in exc.value.headline


def test_buffer_dtype_must_match_the_pointer_type(kernel):
    with pytest.raises(EmulatorError, match=r"argument 0 is float\* but buffer 'x' holds float64"):
        run(kernel("tail_read.cu"), TAIL_SIG, [Launch("scale_guarded", (1, 1, 1), (64, 1, 1), 0, ("x", "y", 64))],
            {"x": np.ones(64), "y": np.zeros(64, np.float32)})


@pytest.mark.parametrize("signatures,expected", [
    ({"bad name": (F32,)}, "is not a C identifier"),
    ({"k": (Param("ptr", "short"),)}, "unsupported pointer type 'short'"),
    ({"k": (Param("u8", ""),)}, "is not a Param of kind"),
])
def test_bad_signatures_are_rejected(signatures, expected):
    with pytest.raises(EmulatorError, match=expected):
        run("", signatures, [], {})


def test_bad_options_are_rejected():
    with pytest.raises(EmulatorError, match="sanitize must be one of"):
        run("", {}, [], {}, sanitize="memory")
    with pytest.raises(EmulatorError, match="workers must be a positive int"):
        run("", {}, [], {}, workers=0)


def test_gxx_errors_name_the_kernel_line(prelude):
    source = prelude + "\nextern \"C\" __global__ void broken(float* y) {\n  y[0] = undeclared_name;\n}\n"
    line = source.splitlines().index("  y[0] = undeclared_name;") + 1
    with pytest.raises(EmulatorError) as exc:
        run(source, {"broken": (F32,)}, [], {})
    err = exc.value
    assert err.kind == "build" and err.code == "N0902"
    assert err.headline == "g++ could not compile the kernel for the CPU emulator"
    assert re.search(rf"kernel\.cu:{line}:\d+: error: .undeclared_name. was not declared", str(err))


def test_missing_gxx_is_backend_unavailable(kernel, monkeypatch):
    monkeypatch.setattr(emulate_build, "CXX", "napkin-no-such-gxx")
    with pytest.raises(BackendUnavailable) as exc:
        _scale(kernel, [], np.ones(4, np.float32))
    assert exc.value.code == "N0901" and "napkin-no-such-gxx" in str(exc.value)


def test_builds_are_cached_by_source_and_sanitizer(kernel, monkeypatch, tmp_path, seed_support):
    seed_support(tmp_path)      # support folders this run already built (g++ time, not the test)
    monkeypatch.setenv("NAPKIN_EMULATOR_CACHE", str(tmp_path))
    x = np.ones(64, np.float32)
    launch = Launch("scale_guarded", (1, 1, 1), (64, 1, 1), 0, ("x", "y", 64))

    def binaries():
        return sorted(p for p in tmp_path.iterdir() if p.suffix == ".emu")

    def others():       # support folders only: no leftover build or run folders
        return sorted(p.name[:8] for p in tmp_path.iterdir() if p.suffix != ".emu")

    _scale(kernel, [launch], x)
    (first,) = binaries()
    supports = [p for p in tmp_path.iterdir() if p.name.startswith("support-")]
    assert supports and set(others()) == {"support-"}
    # a support folder holds the precompiled header, the runtime object, the copy of the
    # headers the keys hash (both were compiled from it) and the manifest that seals them
    assert any(sorted(p.name for p in s.iterdir()) == sorted(
        ["napkin_emulate.h.gch", "runtime.o", store.MANIFEST, *emulate_build._emulator_texts()])
        for s in supports)
    stamp = first.stat().st_mtime_ns
    np.testing.assert_array_equal(_scale(kernel, [launch], x)["y"], 2 * x)
    assert binaries() == [first] and first.stat().st_mtime_ns == stamp        # reused
    _scale(kernel, [launch], x, sanitize="address")
    assert len(binaries()) == 2 and set(others()) == {"support-"}             # another key
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("support-")]) >= 2


def test_kernel_builds_use_the_precompiled_header(monkeypatch, tmp_path, seed_support):
    # g++ -H marks a precompiled header it used with "!"; one it found but could not use
    # with "x". A flag that differs between the header's build and the kernel's would
    # silently double the CPU time of every emulator build.
    b = emulate_build
    seed_support(tmp_path)
    monkeypatch.setenv("NAPKIN_EMULATOR_CACHE", str(tmp_path))
    flags = b.flags_for("none", optimize=False)
    support = b._support(tmp_path, flags, b.CXX, b._emulator_texts())
    (tmp_path / "k.cpp").write_text("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    proc = subprocess.run([b.CXX, *flags, f"-I{support}", "-include", b.HEADER.name,
                           "-H", "-fsyntax-only", "k.cpp"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"! {support / b.HEADER.name}.gch" in proc.stderr.splitlines()
