"""napkin.compile: Kernel objects on the CPU backends, and the launch path with a fake GPU
(every argument check fires before any launch)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError, NapkinLaunchError
from napkin.kernel import Kernel

from .fake_gpu import DeviceArray, FakeLauncher


@pytest.fixture
def qkv(rng):
    return tuple(rng.standard_normal(s).astype(np.float16)
                 for s in ((2, 3, 37, 64), (2, 3, 50, 64), (2, 3, 50, 64)))


def test_compile_with_numpy_returns_the_reference(qkv):
    k = napkin.compile("attention", d=64)
    assert k.backend == "reference"
    (out,) = k(*qkv)             # a tuple of outputs, as napkin.run returns
    (expected,) = napkin.run("attention", *qkv)
    assert isinstance(out, np.ndarray) and np.array_equal(out, expected)
    assert np.array_equal(k(Q=qkv[0], K=qkv[1], V=qkv[2])[0], expected)


def test_torch_cpu_tensors_in_torch_tensors_out(qkv):
    import torch        # (here: collecting this file does not import PyTorch)
    k = napkin.compile("attention")
    (out,) = k(*(torch.from_numpy(a) for a in qkv))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float16
    (expected,) = napkin.run("attention", *qkv)
    assert np.array_equal(out.numpy(), expected)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_other_cpu_backends(backend, qkv):
    k = napkin.compile("attention", backend=backend)
    (expected,) = napkin.run("attention", *qkv)
    err = np.max(np.abs(k(*qkv)[0].astype(np.float64) - expected.astype(np.float64)))
    assert err < 5e-3


SCALARS = """\
axis i
in X[i]: f32
in k[]: i32
in s[]: f32
Y[i] = X[(k)] * s + X
T[] = sum[i](X)
out Y: f32, T: f32
"""


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_scalar_inputs_as_0_d_arrays_numpy_scalars_and_numbers(backend):
    """A scalar input is a 0-d array, a NumPy scalar or a Python number, by position or by
    name (np.ascontiguousarray made them shape (1,), refused as N0308); scalar outputs are
    0-d. Against NumPy."""
    X = np.array([0.5, -1.25, 2.0, 3.5, -0.75], np.float32)
    want_Y, want_T = X[3] * 1.5 + X, X.sum()
    for args, named in (((X, np.array(3, np.int32), np.float32(1.5)), {}),
                        ((), {"X": X, "k": 3, "s": 1.5})):
        Y, T = napkin.run(SCALARS, *args, **named, backend=backend)
        assert T.shape == () and Y.shape == (5,)
        np.testing.assert_allclose(Y, want_Y, rtol=1e-6)
        np.testing.assert_allclose(T, want_T, rtol=1e-6)


def test_kernel_properties(qkv):
    k = napkin.compile("softmax")
    assert 'extern "C" __global__' in k.source and ".entry napkin_k0" in k.ptx
    assert k.plan.kernels[0].kernel.name == "k0"
    (res,) = k.resources.values()
    assert res["spill_stores"] == 0 and res["registers"] > 0 and res["smem_bytes"] > 0
    assert "kernel k0" in k.explain()


def test_kernel_shows_its_planned_picture_in_jupyter():
    from xml.etree import ElementTree

    from napkin.draw import draw_plan
    k = napkin.compile("attention", target="h100")
    svg = k._repr_svg_()
    assert svg == draw_plan(k.plan)
    root = ElementTree.fromstring(svg)
    text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "attention on h100" in text and "s_x=" in text and "total k0" in text


def test_out_argument_on_cpu(qkv):
    k = napkin.compile("attention")
    target = np.full((2, 3, 37, 64), np.nan, dtype=np.float16)
    k(*qkv, out=target)
    assert not np.isnan(target).any()


# -- the launch path, with a fake GPU ------------------------------------------------------

def gpu_kernel(name="attention", **kw):
    """A Kernel on the fake GPU; its cubins come through the run's kernel cache (these tests are
    about launches: test_cache.py tests the cache, and the same attention cubin serves several)."""
    launcher = FakeLauncher(**kw)
    return Kernel(napkin.load(name), backend="cuda", launcher=launcher), launcher


def dev(*shape, typestr="<f2", **kw):
    return DeviceArray(shape, typestr, **kw)


def test_launch_passes_pointers_and_sizes_as_64_bit():
    k, launcher = gpu_kernel()
    Q, K, V = dev(2, 3, 37, 64), dev(2, 3, 50, 64), dev(2, 3, 50, 64)
    (out,) = k(Q, K, V)
    assert isinstance(out, DeviceArray) and out.shape == (2, 3, 37, 64) and out.typestr == "<f2"
    (launch,) = launcher.launches
    assert launch["name"] == "napkin_k0" and launch["block"] == k.compiled_for(
        {"b": 2, "h": 3, "q": 37, "x": 50})[1].kernels[0].threads
    pointers = [a for a in launch["args"] if isinstance(a, np.uint64)]
    sizes = [a for a in launch["args"] if isinstance(a, np.int64)]
    assert pointers == [np.uint64(Q.ptr), np.uint64(K.ptr), np.uint64(V.ptr), np.uint64(out.ptr)]
    assert sorted(int(s) for s in sizes) == sorted([2, 3, 37, 50])
    assert isinstance(launch["binary"], bytes) and launch["binary"][:4] == b"\x7fELF"


def test_arrays_off_16_byte_addresses_go_through_aligned_copies():
    # the kernels' 16-byte cp.async copies assume aligned pointers (Program.alignment): an
    # input or out= array at an element-aligned but not 16-byte-aligned address is staged
    k, launcher = gpu_kernel()
    Q = dev(2, 3, 37, 64, ptr=(1 << 31) + 2)
    K, V = dev(2, 3, 50, 64), dev(2, 3, 50, 64)
    out = dev(2, 3, 37, 64, ptr=(1 << 32) + 6)
    k(Q, K, V, out=(out,))
    (launch,) = launcher.launches
    pointers = [int(a) for a in launch["args"] if isinstance(a, np.uint64)]
    assert all(ptr % 16 == 0 for ptr in pointers)
    assert pointers[1:3] == [K.ptr, V.ptr]                 # aligned arrays are passed as they are
    assert pointers[0] != Q.ptr and pointers[3] != out.ptr
    # Q copied in before the launch, the output copied back after it
    assert launcher.copies == [(pointers[0], Q.ptr), (out.ptr, pointers[3])]


def test_target_and_arch_come_from_the_device():
    k, _ = gpu_kernel(arch="sm_80", device_name="NVIDIA A100-SXM4-80GB")
    assert k.arch == "sm_80" and k.target.name == "a100"


BAD = {
    "dtype": lambda: (dev(2, 3, 37, 64, typestr="<f4"), dev(2, 3, 50, 64), dev(2, 3, 50, 64)),
    "contiguity": lambda: (dev(2, 3, 37, 64, strides=(2, 2 * 2, 2 * 6, 2 * 222)), dev(2, 3, 50, 64),
                           dev(2, 3, 50, 64)),
    "alignment": lambda: (dev(2, 3, 37, 64, ptr=(1 << 30) + 1), dev(2, 3, 50, 64), dev(2, 3, 50, 64)),
    "device": lambda: (dev(2, 3, 37, 64), dev(2, 3, 50, 64, device=1), dev(2, 3, 50, 64)),
    "axis sizes": lambda: (dev(2, 3, 37, 64), dev(2, 3, 50, 64), dev(2, 3, 51, 64)),
    "static size": lambda: (dev(2, 3, 37, 32), dev(2, 3, 50, 32), dev(2, 3, 50, 32)),
    "rank": lambda: (dev(3, 37, 64), dev(2, 3, 50, 64), dev(2, 3, 50, 64)),
    "not an array": lambda: ([1.0], dev(2, 3, 50, 64), dev(2, 3, 50, 64)),
}


@pytest.mark.parametrize("problem", sorted(BAD))
def test_every_check_fires_before_any_launch(problem):
    k, launcher = gpu_kernel()
    with pytest.raises(NapkinLaunchError) as exc:
        k(*BAD[problem]())
    assert launcher.launches == []
    assert exc.value.diagnostics[0].code in ("N0903", "N0308")


@pytest.mark.parametrize("problem", ["alias", "shape", "dtype", "count", "strided", "list"])
def test_out_checks(problem):
    """Each refused out= says what to pass instead (shape, dtype, contiguity and a non-array
    had no help line)."""
    k, launcher = gpu_kernel()
    Q, K, V = dev(2, 3, 37, 64), dev(2, 3, 50, 64), dev(2, 3, 50, 64)
    out = {"alias": DeviceArray((2, 3, 37, 64), "<f2", ptr=Q.ptr + 128),
           "shape": dev(2, 3, 36, 64), "dtype": dev(2, 3, 37, 64, typestr="<f4"),
           "count": (dev(2, 3, 37, 64), dev(2, 3, 37, 64)),
           "strided": dev(2, 3, 37, 64, strides=(2, 12, 444, 1776)), "list": [[0.0]]}[problem]
    with pytest.raises(NapkinLaunchError) as exc:
        k(Q, K, V, out=out)
    assert launcher.launches == []
    assert exc.value.diagnostics[0].help


def test_missing_and_unknown_inputs_are_refused():
    k, launcher = gpu_kernel()
    with pytest.raises(NapkinError):
        k(dev(2, 3, 37, 64), dev(2, 3, 50, 64))
    with pytest.raises(NapkinError):
        k(dev(2, 3, 37, 64), dev(2, 3, 50, 64), dev(2, 3, 50, 64), W=dev(1))
    assert launcher.launches == []


def test_zero_size_problems_launch_nothing():
    k, launcher = gpu_kernel()
    (out,) = k(dev(2, 0, 37, 64), dev(2, 0, 50, 64), dev(2, 0, 50, 64))
    assert out.shape == (2, 0, 37, 64) and launcher.launches == []


def test_huge_batches_respect_the_grid_limit():
    k, launcher = gpu_kernel()
    k(dev(1 << 16, 1 << 15, 1, 64), dev(1 << 16, 1 << 15, 3, 64), dev(1 << 16, 1 << 15, 3, 64))
    assert launcher.launches   # decode shapes may unfuse S (its product on tensor cores)
    for launch in launcher.launches:
        assert 1 <= launch["grid"] <= 2**31 - 1


def test_shared_memory_over_the_device_limit_is_refused():
    k, launcher = gpu_kernel("matmul", smem_limit=1024)
    with pytest.raises(NapkinError) as exc:
        k(dev(300, 200), dev(200, 100))
    assert exc.value.code == "N0603" and launcher.launches == []


def test_multi_kernel_plans_launch_in_order_with_intermediates():
    k, launcher = gpu_kernel("mlp")
    X, W1, W2 = dev(4096, 4096), dev(4096, 16384), dev(16384, 4096)
    k(X, W1, W2)
    assert [l["name"] for l in launcher.launches] == ["napkin_k0", "napkin_k1"]
    first, second = launcher.launches
    h_pointer = first["args"][3]     # k0 stores H; k1 loads it
    assert h_pointer in second["args"]


@pytest.mark.parametrize("arch", ["sm_12", "bogus; rm -rf /", 90])
def test_a_wrong_arch_is_refused_at_compile(arch):
    """Not later, when .ptx or a launch first needs it."""
    with pytest.raises(NapkinError) as exc:
        napkin.compile("attention", arch=arch, backend="reference", d=64)
    assert exc.value.diagnostics[0].code == "N0802"


def test_a_last_block_merge_launches_once_with_counters_kept_per_stream():
    """cross_entropy split in 8 with its merge in the partial kernel's last blocks: one launch
    a call; the counters are allocated zeroed once per stream and passed to every launch on
    it (each launch leaves them at zero: codegen/tail.py), another stream gets its own."""
    from napkin.pipeline import Options
    launcher = FakeLauncher()
    k = Kernel(napkin.load("cross_entropy"), Options.make(split={"v": 8}, merge="last-block"),
               backend="cuda", launcher=launcher)
    Z, label = dev(3, 5000), dev(3, typestr="<i4")
    k(Z, label)
    k(Z, label)
    k(Z, label, stream="other")
    first, second, third = launcher.launches
    assert first["name"] == second["name"] == third["name"] == "napkin_k0"
    from napkin.codegen.lower import COUNTER
    (kprog,) = k.compiled_for({"t": 3, "v": 5000})[1].kernels
    (i,) = [i for i, p in enumerate(kprog.params) if p.array == COUNTER]
    assert first["args"][i] == second["args"][i] != third["args"][i]
