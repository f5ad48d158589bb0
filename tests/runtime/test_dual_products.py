"""Products sharing one streamed chunk loop, each into accumulators of its own (compiler/duals.py,
codegen/mma.py: dual GEMM): SwiGLU's gate and up projections and their gating in one tensor-core
kernel, planned at scale, priced with both accumulators, emulated at odd sizes against float64
(f16 and bf16, a shared operand and none, operands stored either way)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import napkin
from napkin.compiler import duals, occupancy, tensorcore
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT
from napkin.pipeline import run_plan

from .close import assert_close

THOROUGH = pytest.mark.thorough

# the library's swiglu without its down projection: H is what the dual kernel stores
SWIGLU = """axis t, m, f
in X[t m]: f16
in Wg[m f]: f16
in Wu[m f]: f16
G[t f] = X * Wg
U[t f] = X * Wu
H[t f] = silu(G) * U
out H: f16
"""
# GeGLU in bf16, X stored along its rows (its tile read by ldmatrix .trans), the weights along m
GEGLU = """axis t, m, f
in X[m t]: bf16
in Wg[f m]: bf16
in Wu[f m]: bf16
G[t f] = X * Wg
U[t f] = X * Wu
H[t f] = gelu(G) * U
out H: bf16
"""
# no operand shared, one product also stored, a bias over the columns
APART = """axis t, m, f
in A1[t m]: f16, B1[m f]: f16, A2[t m]: f16, B2[m f]: f16
in bias[f]: f16
P1[t f] = A1 * B1
P2[t f] = A2 * B2
Z[t f] = relu(P1 + bias) * P2
out Z: f16
out P1: f16
"""


def _products(p):
    """The plan's kernels with products of their own accumulators: (kernel plan, its duals)."""
    return [(kp, kp.schedule.site.duals) for kp in p.kernels
            if getattr(kp.schedule.site, "duals", ())]


def test_swiglu_gate_and_up_are_one_tensor_core_kernel_at_scale():
    # the library diagram (model, h100, the shape LLaMA-7B's MLP has): G, U and H in one
    # kernel (were two: U stored in f32 and read back), the down projection its own
    p = plan(napkin.load("swiglu"), "h100", {"t": 4096, "m": 4096, "f": 11008, "o": 4096})
    assert len(p.kernels) == 2
    ((kp, found),) = _products(p)
    assert kp is p.kernels[0] and kp.schedule.engine == PRODUCT and len(found) == 1
    site = kp.schedule.site
    assert site.a == found[0][1]                  # X: the one A tile of both products
    wm, wn, tm, tn = tensorcore.warp_tile(kp.choice, site, p.sizes)
    # both accumulator tiles within the budget, and priced: the register estimate counts both
    assert 2 * tm * tn // 32 <= tensorcore.MAX_ACCUMULATORS
    assert kp.model.products == (2, 1, 2) == duals.counts(site)
    assert occupancy.fragment_values(kp.model, kp.choice, p.sizes) == \
        2 * tm * tn / 32 + tm / 4 + 2 * tn / 4


def test_projections_of_one_operand_each_only_stored_are_no_dual_kernel():
    # K and V of one X, stored apart: siblings sharing a launch (siblings.py), X from L2
    text = SWIGLU.replace("H[t f] = silu(G) * U\nout H: f16", "out G: f16\nout U: f16")
    p = plan(napkin.load(text), "h100", {"t": 2048, "m": 1024, "f": 1024})
    assert len(p.kernels) == 2 and not _products(p)
    assert all(kp.schedule.engine == PRODUCT for kp in p.kernels)


def test_the_dual_kernel_is_explained():
    from napkin.explain import render_text, report
    p = plan(napkin.load(SWIGLU), "h100", {"t": 1024, "m": 1024, "f": 1024})
    text = render_text(report(p, compare=False))
    assert "on tensor cores: 2 products (G, U) in one chunk loop of m, each into accumulators " \
           "of its own (X staged once for all)" in text, text


def _emulated(text, sizes, arrays, rng_dtype, group=None):
    p = plan(napkin.load(text), "h100", sizes, engine="tensor-cores",
             overrides={"group": group} if group else None)
    ((kp, _),) = _products(p)
    assert len(p.kernels) == 1 and kp.schedule.site.dtype == rng_dtype
    return run_plan(p, arrays, sizes), kp


def _gelu(x):          # (the tanh form: runtime/elementwise.py)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _silu(x):
    return x / (1 + np.exp(-x))


@pytest.mark.parametrize("group", [
    None,                                   # the planner's tiles (one 16 x 8 warp tile here)
    pytest.param({"t": 64, "f": 32}, marks=THOROUGH)])    # warps and fragments of each
def test_swiglu_emulated_at_odd_sizes(group, rng):
    sizes = {"t": 37, "m": 50, "f": 29}      # chunks of 16 or more: a partial last one
    x = rng.standard_normal((37, 50)).astype(np.float16)
    wg, wu = ((rng.standard_normal((50, 29)) * 0.2).astype(np.float16) for _ in range(2))
    out, kp = _emulated(SWIGLU, sizes, {"X": x, "Wg": wg, "Wu": wu}, "f16", group)
    if group:
        assert dict(kp.choice.group) == group
    f = [a.astype(np.float64) for a in (x, wg, wu)]
    assert_close(out["H"], _silu(f[0] @ f[1]) * (f[0] @ f[2]), "f16", slack=4.0)


@THOROUGH
def test_geglu_in_bf16_with_operands_stored_the_other_way_emulated(rng):
    sizes = {"t": 37, "m": 50, "f": 29}
    arrays = {"X": rng.standard_normal((50, 37)), "Wg": rng.standard_normal((29, 50)) * 0.2,
              "Wu": rng.standard_normal((29, 50)) * 0.2}
    arrays = {n: v.astype(ml_dtypes.bfloat16) for n, v in arrays.items()}
    out, _ = _emulated(GEGLU, sizes, arrays, "bf16", {"t": 32, "f": 16})
    f = {n: v.astype(np.float64) for n, v in arrays.items()}
    g, u = f["X"].T @ f["Wg"].T, f["X"].T @ f["Wu"].T
    assert_close(out["H"], _gelu(g) * u, "bf16", slack=4.0)


@THOROUGH
def test_products_sharing_no_operand_one_also_stored_emulated(rng):
    sizes = {"t": 37, "m": 50, "f": 29}
    arrays = {n: (rng.standard_normal(s) * 0.3).astype(np.float16) for n, s in (
        ("A1", (37, 50)), ("B1", (50, 29)), ("A2", (37, 50)), ("B2", (50, 29)), ("bias", (29,)))}
    out, kp = _emulated(APART, sizes, arrays, "f16", {"t": 32, "f": 16})
    assert kp.model.products == (2, 2, 2)
    f = {n: v.astype(np.float64) for n, v in arrays.items()}
    p1 = f["A1"] @ f["B1"]
    assert_close(out["P1"], p1, "f16", slack=4.0)
    assert_close(out["Z"], np.maximum(p1 + f["bias"], 0) * (f["A2"] @ f["B2"]), "f16", slack=4.0)


@THOROUGH
def test_the_library_dual_kernel_compiles_without_spills():
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.runtime import nvrtc
    p = plan(napkin.load("swiglu"), "h100", {"t": 4096, "m": 4096, "f": 11008, "o": 4096})
    ((kp, _),) = _products(p)
    r = nvrtc.compile(render(lower(p)), arch="sm_90").resources[f"napkin_{kp.kernel.name}"]
    assert r.spill_stores == 0 and r.spill_loads == 0, r
    assert r.registers <= 255


@THOROUGH
def test_swiglu_gradient_takes_a_dual_kernel_and_is_emulated(rng):
    # napkin.grad of the library swiglu: G, U, H, dU and dG in one kernel (m streamed, X
    # shared); dX = dU Wu^T + dG Wg^T stays a sum of products (sums.py), dWg and dWu (each
    # only stored) share a launch (siblings.py), dH and dWd plain products
    d = napkin.grad(napkin.load("swiglu"))
    big = plan(d, "h100", {"t": 4096, "m": 4096, "f": 11008, "o": 4096})
    ((kp, _),) = _products(big)
    assert len(big.kernels) == 6 and len(kp.kernel.stores) == 3     # H, dU, dG
    sizes = {"t": 37, "m": 50, "f": 29, "o": 23}
    p = plan(d, "h100", sizes, engine="tensor-cores")
    assert len(_products(p)) == 1
    shapes = {"X": (37, 50), "Wg": (50, 29), "Wu": (50, 29), "Wd": (29, 23), "dY": (37, 23)}
    arrays = {n: (rng.standard_normal(s) * (1.0 if n in ("X", "dY") else 0.2)).astype(
        np.float16) for n, s in shapes.items()}
    out = run_plan(p, arrays, sizes)
    f = {n: v.astype(np.float64) for n, v in arrays.items()}
    g, u = f["X"] @ f["Wg"], f["X"] @ f["Wu"]
    sig = 1 / (1 + np.exp(-g))
    dh = f["dY"] @ f["Wd"].T
    du, dg = dh * g * sig, dh * u * sig * (1 + g * (1 - sig))
    want = {"dX": du @ f["Wu"].T + dg @ f["Wg"].T, "dWg": f["X"].T @ dg,
            "dWu": f["X"].T @ du, "dWd": (g * sig * u).T @ f["dY"]}
    for name, value in want.items():
        assert_close(out[name], value, "f16", slack=8.0)
