"""A view that only renames a load (`X[t m2] * W[m2 f]`, the block's `N1[b s m]`) is a plain
tensor-core operand (tensorcore.Site.renamed): its tile is the load's, copied by cp.async,
no computed staging beside it, the stages a load gets; a transposing rename (`W[m f]` of
W[f m]) too, its tile's contiguous axis the view's last. Run by the CPU emulator against
the float64 reference at odd sizes and multiples of 8."""

from __future__ import annotations

import napkin
import pytest
from napkin.compiler import schedule
from napkin.compiler.plan import plan

from .test_tensor_cores import assert_close

CASES = {
    # both inputs renamed (the einsum trap avoided)
    "inputs": "axis t, m, f, m2\nin X[t m]: f16\nin W[m f]: f16\n"
              "Y[t f] = X[t m2] * W[m2 f]\nout Y: f16",
    # an f16 intermediate read renamed (its own kernel stores it)
    "intermediate": "axis t, m, f, m2\nin X[t m]: f16\nin W[m f]: f16\nN[t m]: f16 = X * 2.0\n"
                    "Y[t f] = N[t m2] * W[m2 f]\nout Y: f16",
    # a rename that transposes: W stored [f m], read with m first (m and f one size)
    "transposed": "axis t, m, f\nin X[t m]: bf16\nin W[f m]: bf16\nY[t f] = X * W[m f]\nout Y: bf16",
    # the block's K projection: an RMSNorm's intermediate read along the keys (and by the Q
    # projection along the queries: read by K alone, N1 would be computed as N1[b s m],
    # compiler/rename.py)
    "k_projection": "axis b, t, s, m, h, d\nin X[b t m]: f16\nin g[m]: f16\nin Wk[m h d]: f16\n"
                    "in Wq[m h d]: f16\nN1[b t m] = X * rsqrt(mean[m](X * X) + 1e-6) * g\n"
                    "K[b h s d] = N1[b s m] * Wk\nQ[b h t d] = N1 * Wq\nout K: f16\nout Q: f16",
    # a computed operand reading a load renamed: vectorised through the view
    "computed": "axis t, m, f, m2\nin X[t m]: f16\nin g[m]: f16\nin W[m f]: f16\n"
                "Y[t f] = X[t m2] * g[m2] * W[m2 f]\nout Y: f16",
}
ODD = {"b": 2, "t": 37, "s": 37, "m": 41, "m2": 41, "f": 19, "h": 2, "d": 24}
EIGHTS = {"b": 1, "t": 45, "s": 45, "m": 72, "m2": 72, "f": 24, "h": 3, "d": 16}
BIG = {"b": 2, "t": 4096, "s": 4096, "m": 2048, "m2": 2048, "f": 8192, "h": 16, "d": 128}


def _plan(name, target="h100"):
    d = napkin.load(CASES[name])
    sizes = {a: BIG[a] for a, s in d.axes.items() if s is None}
    if name == "transposed":
        sizes["f"] = sizes["m"]
    return d, plan(d, target, sizes)


def _products(p):
    return [kp for kp in p.kernels if kp.schedule.engine == schedule.PRODUCT]


def _sizes(d, sizes, square=False):
    out = {a: s for a, s in sizes.items() if a in d.axes and d.axes[a] is None}
    if square:
        out["f"] = out["m"]
    if "s" in out:
        out["s"] = out["t"]
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_renamed_operands_are_copied_not_computed(name):
    d, p = _plan(name)
    (kp,) = [k for k in _products(p) if k.schedule.site.renamed]
    site = kp.schedule.site
    renamed = dict(site.renamed)
    assert renamed and not set(renamed) & set(site.computed)
    # no computed staging of a renamed operand, and the tiles' stages a load's
    assert all(n not in renamed for n, *_ in kp.model.staged)
    assert kp.schedule.stages >= 3
    # explain's shared-memory rows: the loads' tiles, nothing computed beside them
    from napkin.compiler.buffers import buffers
    smem = [r for r in buffers(p, kp) if r["level"] == "smem"]
    assert "operand computed as staged" not in {r["role"] for r in smem if ":view" in r["name"]}
    assert sum(r["bytes"] for r in smem) == kp.cost.levels[1].M


def test_a_renamed_product_plans_as_the_plain_one():
    """`X[t m2] * W[m2 f]` is predicted as `A * B` at the same sizes (model, h100 compiled
    for sm_90: on sm_90a the plain product runs on wgmma, which a renamed operand does not
    take yet, compiler/wgmma.py)."""
    _, p = _plan("inputs", "h100:arch=sm_90")
    mm = plan(napkin.load("matmul"), "h100:arch=sm_90", {"m": 4096, "k": 2048, "n": 8192})
    (kp,), (mk,) = p.kernels, mm.kernels
    assert kp.schedule.stages == mk.schedule.stages
    assert kp.cost.time == pytest.approx(mk.cost.time, rel=1e-9)


def test_a_diagonal_is_not_a_rename():
    """`A[i i]` reads other positions than A's: not a rename (it stays computed)."""
    from napkin.compiler import ir
    from napkin.compiler.operand_reads import renames
    d = napkin.load("axis i, j\nin A[i j]: f16\nin W[i j]: f16\nY[i j] = A[i i] * W\nout Y: f32")
    g = d.ir
    views = [n for n in g.nodes if isinstance(ir.op(g, n), ir.View)]
    assert views and all(renames(g, n) is None for n in views)
    g = napkin.load(CASES["inputs"]).ir
    views = [n for n in g.nodes if isinstance(ir.op(g, n), ir.View)]
    assert len(views) == 2 and all(renames(g, n) is not None for n in views)


@pytest.mark.parametrize("name", list(CASES))
def test_renamed_operands_match_the_reference(name):
    d, p = _plan(name)
    assert any(k.schedule.site.renamed for k in _products(p))
    for sizes in (ODD, EIGHTS):
        assert_close(d, p, _sizes(d, sizes, square=name == "transposed"))
