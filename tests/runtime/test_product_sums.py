"""A sum of matrix products over one streamed axis as one tensor-core kernel (compiler/sums.py,
codegen/mma.py: a chunk loop per pair into the same accumulators): planned, and emulated at
odd sizes against float64; products read otherwise than through the sum stay apart."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT
from napkin.pipeline import run_plan

from .close import assert_close

TWO = """axis t, m, k
in A1[t k]: f16, B1[k m]: f16, A2[t k]: f16, B2[k m]: f16
in bias[m]: f16
Z[t m] = sum[k](A1 * B1) + bias + sum[k](A2 * B2)
out Z: f16
"""
# dX of projected self-attention's gradient as `napkin grad` writes it (the cotangents' layouts
# of compiler/grad.py), its three products over `h d` (one axis `(h*d)`: local_merge.py)
THREE = """axis t, m, h
axis d = 16
in dV[h d t]: f16, dK[h d t]: f16, dQ[h d t]: f16
in Wq[m h d]: f16, Wk[m h d]: f16, Wv[m h d]: f16
g0[t m] = dV * Wv
g0_[t m] = dK * Wk
g0__[t m] = dQ * Wq
dX[t m] = g0 + g0_ + g0__
out dX: f16
"""

# dN1 of the transformer block's gradient (tests/runtime/test_block_parts.BLOCK_TEXT): two of
# its products over the keys' `s`, read renamed along `t` (rename.py computes them under `t`)
BLOCK = """axis b, t, s, m, h
axis d = 16
in dV[b s h d]: f16, dK[b s h d]: f16, dQ[b t h d]: f16
in Wq[m h d]: f16, Wk[m h d]: f16, Wv[m h d]: f16
g22[b s m] = dV * Wv
g19[b s m] = dK * Wk
g16[b t m] = dQ * Wq
dN1[b t m] = g22[b t m] + g19[b t m] + g16
out dN1: f16
"""


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def _summed(p):
    """The plan's kernels that sum products in one accumulator: (kernel plan, its pairs)."""
    return [(kp, kp.schedule.site.pairs) for kp in p.kernels
            if getattr(kp.schedule.site, "pairs", ())]


def test_a_sum_of_two_products_and_a_bias_is_one_tensor_core_kernel(rng):
    d = napkin.load(TWO)
    # at scale, by the model (h100): one kernel on tensor cores (the CUDA cores' was 430 us)
    big = plan(d, "h100", {"t": 2048, "m": 1024, "k": 1024})
    assert len(big.kernels) == 1 and big.kernels[0].schedule.engine == PRODUCT
    assert len(_summed(big)) == 1 and big.kernels[0].cost.time < 40e-6, big.kernels[0].cost.time
    sizes = {"t": 37, "m": 29, "k": 50}        # (chunks of 16: a partial last one per pair)
    p = plan(d, "h100", sizes, engine="tensor-cores")
    ((kp, pairs),) = _summed(p)
    assert len(p.kernels) == 1 and len(pairs) == 1
    a1, a2 = _f16(rng, (37, 50)), _f16(rng, (37, 50))
    b1, b2 = _f16(rng, (50, 29), 0.2), _f16(rng, (50, 29), 0.2)
    bias = _f16(rng, (29,))
    out = run_plan(p, {"A1": a1, "B1": b1, "A2": a2, "B2": b2, "bias": bias}, sizes)
    f = [x.astype(np.float64) for x in (a1, b1, a2, b2, bias)]
    assert_close(out["Z"], f[0] @ f[1] + f[4] + f[2] @ f[3], "f16", slack=4.0)


@pytest.mark.parametrize("text, batch", [(THREE, ()), (BLOCK, (2,))], ids=["dX", "dN1"])
def test_a_cotangent_of_three_projections_is_one_kernel_emulated_at_odd_sizes(text, batch, rng):
    d = napkin.load(text)
    big = plan(d, "h100", {"b": 2, "t": 2048, "s": 2048, "m": 1024, "h": 16})
    ((kp, pairs),) = _summed(big)
    assert len(big.kernels) == 1 and len(pairs) == 2 and kp.schedule.engine == PRODUCT
    sizes = {"b": 2, "t": 37, "s": 37, "m": 37, "h": 3}    # h * d = 48: 3 chunks of 16 a pair
    p = plan(d, "h100", sizes, engine="tensor-cores")
    ((kp, pairs),) = _summed(p)
    assert len(p.kernels) == 1 and len(pairs) == 2
    cotangent = (3, 16, 37) if not batch else (*batch, 37, 3, 16)
    grads = {n: _f16(rng, cotangent) for n in ("dV", "dK", "dQ")}
    weights = {n: _f16(rng, (37, 3, 16), 48 ** -0.5) for n in ("Wv", "Wk", "Wq")}
    out = run_plan(p, {**grads, **weights}, {a: n for a, n in sizes.items() if a in d.axes})
    spec = "hdt,mhd->tm" if not batch else "bthd,mhd->btm"
    want = sum(np.einsum(spec, grads[g].astype(np.float64), weights[w].astype(np.float64))
               for g, w in (("dV", "Wv"), ("dK", "Wk"), ("dQ", "Wq")))
    assert_close(out["dX" if not batch else "dN1"], want, "f16", slack=4.0)


# the products as statements of their own: fusion may put them in one kernel where legal
APART = """axis t, m, k
in A1[t k]: f16, B1[k m]: f16, A2[t k]: f16, B2[k m]: f16
in bias[m]: f16
P1[t m] = A1 * B1
P2[t m] = A2 * B2
Z[t m] = P1 + bias + P2
out Z: f16
"""


@pytest.mark.parametrize("text, want", [
    # a product also stored: its own value, not the sum's
    (APART.replace("out Z: f16", "out Z: f16\nout P1: f16"),
     lambda f: f["A1"] @ f["B1"] + f["bias"] + f["A2"] @ f["B2"]),
    # a difference is no sum, nor is a multiple
    (APART.replace("+ bias +", "+ bias -"),
     lambda f: f["A1"] @ f["B1"] + f["bias"] - f["A2"] @ f["B2"]),
    (APART.replace("+ bias + P2", "+ bias + 2 * P2"),
     lambda f: f["A1"] @ f["B1"] + f["bias"] + 2 * f["A2"] @ f["B2"]),
    # an array two products read (the model reads it once: each pair would copy it again)
    (APART.replace("P2[t m] = A2 * B2", "P2[t m] = A1 * B2"),
     lambda f: f["A1"] @ f["B1"] + f["bias"] + f["A1"] @ f["B2"]),
], ids=["stored", "difference", "scaled", "shared"])
def test_products_read_otherwise_than_through_a_sum_are_not_summed(text, want, rng):
    d = napkin.load(text)
    assert not _summed(plan(d, "h100", {"t": 2048, "m": 1024, "k": 1024}))
    sizes = {"t": 37, "m": 29, "k": 50}
    p = plan(d, "h100", sizes, engine="tensor-cores")
    assert not _summed(p)
    inputs = {n: _f16(rng, s, 0.3) for n, s in (("A1", (37, 50)), ("B1", (50, 29)),
                                                ("A2", (37, 50)), ("B2", (50, 29)))}
    inputs["bias"] = _f16(rng, (29,))
    inputs = {n: v for n, v in inputs.items() if n in {i.name for i in d.inputs}}
    out = run_plan(p, inputs, sizes)
    f = {n: v.astype(np.float64) for n, v in inputs.items()}
    assert_close(out["Z"], want(f), "f16", slack=4.0)
    if "P1" in out:
        assert_close(out["P1"], f["A1"] @ f["B1"], "f16", slack=4.0)


def test_the_products_apart_are_summed_in_one_kernel_and_explained():
    from napkin.explain import render_text, report
    p = plan(napkin.load(APART), "h100", {"t": 2048, "m": 1024, "k": 1024})
    assert len(p.kernels) == 1 and len(_summed(p)) == 1
    text = render_text(report(p, compare=False))
    assert "on tensor cores: a sum of 2 products (P1 + P2: each pair's chunks of k" in text, text


MIXED = """axis t, m, k
in A1[t k]: bf16, B1[m k]: bf16, A2[k t]: bf16, B2[m k]: bf16
P1[t m] = A1 * B1
P2[t m] = A2 * B2
Z[t m] = relu(P1 + P2)
out Z: bf16
"""


def test_pairs_of_other_layouts_and_bf16_are_summed(rng):
    # A2 stored along its rows (ldmatrix .trans for its tile alone), an epilogue after the sum
    sizes = {"t": 37, "m": 29, "k": 50}
    p = plan(napkin.load(MIXED), "h100", sizes, engine="tensor-cores")
    ((kp, pairs),) = _summed(p)
    assert len(p.kernels) == 1 and kp.schedule.site.dtype == "bf16"
    arrays = {n: (rng.standard_normal(s) * 0.3).astype(ml_dtypes.bfloat16) for n, s in (
        ("A1", (37, 50)), ("B1", (29, 50)), ("A2", (50, 37)), ("B2", (29, 50)))}
    out = run_plan(p, arrays, sizes)
    f = {n: v.astype(np.float64) for n, v in arrays.items()}
    want = np.maximum(f["A1"] @ f["B1"].T + f["A2"].T @ f["B2"].T, 0)
    assert_close(out["Z"], want, "bf16", slack=4.0)
