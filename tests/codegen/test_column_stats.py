"""A tensor-core product's row statistics over its columns lowered in its epilogue
(compiler/colstats.py, codegen/column_stats.py): an LM head and its cross-entropy as one
kernel, Z never stored (v within one block tile, or split over the vocabulary with each share
within one), emulated against a float64 NumPy oracle at odd sizes (labels at the first and
the last column, v = 1, f16 and bf16, one warp and several along v); a run past the columns
the block holds is refused."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.pipeline import run_plan
from napkin.runtime.dtypes import numpy_dtype

HEAD = "axis t, m, v\nin H[t m]: {dt}\nin W[v m]: {dt}\nin label[t]: i32\n"
CE = HEAD + "Z[t v] = H * W\nL[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\nout L: f32\n"


def _plan(t, m, v, dt="f16", parts=None):
    d = napkin.load(Source("<ce>", CE.format(dt=dt)))
    return plan(d, "h100", {"t": t, "m": m, "v": v},
                overrides={"split": {"v": parts}} if parts else None)


def _fused(p):
    """The plan's kernel computing the product with its statistics in the epilogue."""
    (kp,) = [kp for kp in p.kernels if getattr(kp.schedule.site, "columns", ())]
    return kp


def _inputs(t, m, v, dt, seed):
    rng = np.random.default_rng(seed)
    store = numpy_dtype(dt)
    H = (rng.standard_normal((t, m)) * 0.5).astype(np.float32).astype(store)
    W = (rng.standard_normal((v, m)) * 0.5).astype(np.float32).astype(store)
    label = rng.integers(0, v, t).astype(np.int32)
    label[0], label[-1] = 0, v - 1                          # the first and the last column
    return {"H": H, "W": W, "label": label}


def _oracle(x):
    z = x["H"].astype(np.float64) @ x["W"].astype(np.float64).T
    top = z.max(axis=1)
    return np.log(np.exp(z - top[:, None]).sum(axis=1)) + top - z[np.arange(len(z)), x["label"]]


@pytest.mark.parametrize("dt, t, m, v, parts, wn", [("f16", 19, 37, 71, None, 1)] + [
    pytest.param(*c, marks=pytest.mark.thorough) for c in
    [("bf16", 19, 37, 71, None, 1), ("bf16", 2, 16, 1, None, 1), ("f16", 33, 48, 256, None, 2),
     ("f16", 19, 37, 71, 2, 1), ("f16", 130, 48, 500, 2, 2), ("bf16", 67, 40, 700, 3, None),
     ("f16", 33, 48, 300, None, None)]])     # (the planner splits v by 8 itself)
def test_the_fused_cross_entropy_matches_float64(dt, t, m, v, parts, wn):
    p = _plan(t, m, v, dt, parts)
    kp = _fused(p)
    assert not any(kp2.kernel.stores == kp.kernel.stores for kp2 in p.kernels if kp2 is not kp)
    if wn is not None:
        assert dict(kp.choice.warps)[kp.schedule.site.col] == wn
    x = _inputs(t, m, v, dt, t * 1000 + v)
    out = run_plan(p, x, p.sizes)
    want = _oracle(x)
    # f32 sums of exact 16-bit products: within f32 roundings of the logits' scale
    assert np.abs(out["L"].astype(np.float64) - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


def test_one_kernel_where_v_fits_a_tile_and_a_run_past_its_columns_is_refused():
    p = _plan(19, 37, 71)
    (kp,) = p.kernels                                       # Z and L: no t x v buffer
    assert _fused(p) is kp and kp.schedule.site.col == "v"
    tile = kp.schedule.block_tile()["v"]                    # 128: a run may have up to 128
    x = _inputs(19, 37, tile, "f16", 5)
    out = run_plan(p, x, {"t": 19, "m": 37, "v": tile})
    assert np.abs(out["L"].astype(np.float64) - _oracle(x)).max() <= 1e-4
    with pytest.raises(NapkinError) as exc:
        run_plan(p, _inputs(19, 37, tile + 1, "f16", 5), {"t": 19, "m": 37, "v": tile + 1})
    assert exc.value.code == "N0308" and f"v = {tile + 1}" in exc.value.diagnostics[0].message


VARIANTS = {     # (the statements after the head's inputs, what they add to L's oracle)
    "zloss": "Z[t v] = H * W\nlse[t] = logsumexp[v](Z)\n"
             "L[t] = lse - sum[v](where(v == label, Z, 0)) + 1e-4 * lse * lse\nout L: f32\n",
    "f32 Z": "Z[t v]: f32 = H * W\n"
             "L[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\nout L: f32\n",
    "mean": "Z[t v] = H * W\nL[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\n"
            "loss[] = mean[t](L)\nout loss: f32\n",
}


def _variant_oracle(name, x):
    z = x["H"].astype(np.float64) @ x["W"].astype(np.float64).T
    top = z.max(axis=1)
    lse = np.log(np.exp(z - top[:, None]).sum(axis=1)) + top
    loss = lse - z[np.arange(len(z)), x["label"]]
    if name == "zloss":
        return {"L": loss + 1e-4 * lse * lse}
    return {"loss": np.array([loss.mean()])} if name == "mean" else {"L": loss}


@pytest.mark.parametrize("name, dt, t, m, v, parts", [("zloss", "f16", 19, 37, 71, None)] + [
    pytest.param(*c, marks=pytest.mark.thorough) for c in
    [("zloss", "bf16", 33, 48, 300, None), ("f32 Z", "f16", 19, 37, 71, None),
     ("f32 Z", "bf16", 67, 40, 700, 3), ("mean", "f16", 19, 37, 71, None),
     ("mean", "bf16", 130, 48, 500, 2)]])
def test_a_z_loss_an_f32_product_and_a_mean_over_the_rows_fuse(name, dt, t, m, v, parts):
    """The cross-entropy's variants keep the product's statistics in its epilogue (one kernel
    of the product, Z never stored): a z-loss `+ 1e-4 * logsumexp[v](Z)^2` (the logsumexp
    read twice after the merge), Z declared f32 (the accumulators' dtype already), the mean of
    L over t (in a kernel after it); emulated against float64, f16 and bf16, v under a tile
    and split (by the planner at v = 300: 2 shares of 256; by a hint)."""
    d = napkin.load(Source("<ce>", (HEAD + VARIANTS[name]).format(dt=dt)))
    p = plan(d, "h100", {"t": t, "m": m, "v": v},
             overrides={"split": {"v": parts}} if parts else None)
    _fused(p)
    x = _inputs(t, m, v, dt, t * 7 + v)
    want = _variant_oracle(name, x)
    out = run_plan(p, x, p.sizes)
    for key, ref in want.items():
        got = np.asarray(out[key], dtype=np.float64).reshape(ref.shape)
        assert np.abs(got - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max())
