"""Axes merged for one product (compiler/local_merge.py): `A[b t h d] * Wo[h d m]` contracts
`(h*d)` through reshapes of its operands while the rest of the diagram (a `Q[b h t d]`) keeps
h and d; the emitted CUDA (emulator) and the interpreter against a float64 oracle written
here, at odd sizes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import napkin
from napkin.compiler import ir
from napkin.compiler.local_merge import chains_of, merge_products
from napkin.compiler.plan import fuse_kernels, plan, prepare, tile
from napkin.compiler.schedule import PRODUCT, SIMT
from napkin.pipeline import run_plan

from ..runtime.close import assert_close

# the projection beside a use of h that no merge can follow (Q's h before t)
PROJ = """axis b, t, m, h, d
in X[b t m]: {dt}
in A[b t h d]: {dt}
in Q[b h t d]: {dt}
in Wo[{w}]: {dt}
R[b t m] = X + A * Wo
P[b h t d] = Q * 2
out R: {dt}
out P: {dt}
"""


def _text(dt="f16", w="h d m"):
    return PROJ.format(dt=dt, w=w)


def _inputs(rng, b, t, m, h, d, dt=np.float16, w="h d m"):
    shape = {"h": h, "d": d, "m": m}
    return (rng.standard_normal((b, t, m)).astype(dt),
            rng.standard_normal((b, t, h, d)).astype(dt),
            rng.standard_normal((b, h, t, d)).astype(dt),
            (rng.standard_normal(tuple(shape[a] for a in w.split())) * (h * d) ** -0.5).astype(dt))


def _want(X, A, Q, W, w="h d m"):
    x, a, q, wo = (v.astype(np.float64) for v in (X, A, Q, W))
    return x + np.einsum(f"bthd,{w.replace(' ', '')}->btm", a, wo), 2 * q


def _merged(g) -> list:
    return [n for n in g if isinstance(ir.op(g, n), ir.Reshape)]


def test_the_pass_merges_h_d_for_the_product_alone():
    g = prepare(napkin.load(_text()), "h100", dict(b=2, t=64, m=64, h=4, d=16)).graph
    (c,) = [n for n in g if isinstance(ir.op(g, n), ir.Contract)]
    assert ir.op(g, c).axes == ("(h*d)",)
    assert [ir.type_of(g, r).axes for r in _merged(g)] == [("b", "t", "(h*d)"), ("(h*d)", "m")]
    assert ir.type_of(g, g.graph["outputs"]["P"]).axes == ("b", "h", "t", "d")   # P keeps h, d
    assert g.graph["axes"]["(h*d)"].merged == ("h", "d")


def test_not_adjacent_in_one_operand_is_not_merged():
    d = napkin.load(_text(w="d h m"))
    g = prepare(d, "h100", dict(b=2, t=64, m=64, h=4, d=16)).graph
    assert not _merged(g) and all(not chains_of(g, n) for n in g)


@pytest.mark.parametrize("b, t, m, h, d", [(3, 37, 40, 3, 16), (1, 37, 40, 3, 24)])
def test_the_product_through_reshapes_agrees_with_the_oracle(rng, b, t, m, h, d):
    """engine tensor-cores keeps the merged product (without, its kernel is N0606); f16
    inputs, a residual add, Q's h read elsewhere; odd t, m and batch, d = 16 and 24."""
    ins = _inputs(rng, b, t, m, h, d)
    want_r, want_p = _want(*ins)
    for backend in ("emulate", "interpret"):
        kernel = napkin.compile(_text(), backend=backend, engine="tensor-cores")
        R, P = kernel(*ins)
        assert kernel.plan.kernels[0].schedule.engine == PRODUCT
        assert _merged(kernel.plan.graph)
        assert_close(R, want_r, "f16")
        assert_close(P, want_p, "f16")


def test_on_cuda_cores_the_reshape_is_read_per_element(rng):
    """The scalar emitter's reshape (codegen/scalar.py), where the merged IR's product runs on
    the CUDA cores (never the planner's choice at these sizes: built here)."""
    sizes = dict(b=1, t=19, m=24, h=3, d=24)
    problem = prepare(napkin.load(_text()), "h100", sizes)
    assert _merged(problem.graph)
    p = tile(fuse_kernels(replace(problem, unmerged=None), engine="cuda-cores"))
    assert [k.schedule.engine for k in p.kernels] == [SIMT, SIMT]
    ins = _inputs(rng, *sizes.values())
    out = run_plan(p, dict(zip(("X", "A", "Q", "Wo"), ins)), sizes)
    assert_close(out["R"], _want(*ins)[0], "f16")


def test_not_adjacent_stays_correct(rng):
    """W[d h m]: no merge; the product stays on the CUDA cores, and agrees."""
    ins = _inputs(rng, 3, 37, 40, 3, 16, w="d h m")
    R, _ = napkin.run(_text(w="d h m"), *ins, backend="emulate")
    assert_close(R, _want(*ins, w="d h m")[0], "f16")


def test_f32_operands_stay_unmerged_at_their_price():
    """f32 inputs cannot take the tensor cores: the merged IR is no faster, the user's axes
    stay (plan.fuse_kernels prices both)."""
    p = plan(napkin.load(_text("f32")), "h100", dict(b=2, t=1024, m=1024, h=8, d=64))
    assert not _merged(p.graph)


def test_the_projection_at_its_shapes_is_one_tensor_core_product():
    """t=m=4096 on h100 (model): at h=32 d=128 and at h=4 d=16 the projection is one
    tensor-core product over (h*d), and explain says so."""
    from napkin.explain import render_text, report
    for h, d in ((32, 128), (4, 16)):
        p = plan(napkin.load(_text()), "h100", dict(b=1, t=4096, m=4096, h=h, d=d))
        proj = next(k for k in p.kernels if "(h*d)" in k.model.reduced)
        assert proj.schedule.engine == PRODUCT
        assert "contracts h d as one axis (h*d) in this kernel" in render_text(report(p, compare=False))


def test_the_merged_axis_is_not_split_across_blocks():
    """A split's windows read loads, not reshapes of them: the planner never nominates it."""
    from napkin.compiler import split
    g = prepare(napkin.load(_text()), "h100", dict(b=1, t=1, m=64, h=32, d=128)).graph
    assert "local_merge" in split.splittable(g, "(h*d)")


DECODE = """axis b, t, s, h, d, m
in X[b t m]: f16
in Q[b h t d]: f16
in K[b h s d]: f16
in V[b h s d]: f16
in Wo[h d m]: f16
S[b h t s] = Q * K / sqrt(size(d))
A[b t h d] = softmax[s](S) * V
R[b t m] = X + A * Wo
out R: f16
"""


def test_beside_a_split_attention_the_merged_product_agrees(rng):
    """Decoding: the keys split across blocks (`split s`, split.py rewrites the IR) and the
    projection read through reshapes, both in one plan (built from the merged IR), emulated
    against the float64 reference at odd sizes."""
    sizes = dict(b=1, t=1, s=301, h=3, d=16, m=40)
    d = napkin.load(DECODE)
    problem = prepare(d, "h100", sizes, overrides={"split": {"s": 3}})
    assert _merged(problem.graph)
    fused = fuse_kernels(replace(problem, unmerged=None))
    p = tile(fused)
    assert fused.split.axis == "s"
    assert PRODUCT in [k.schedule.engine for k in p.kernels if "(h*d)" in k.model.reduced]
    ins = {s.name: rng.standard_normal(tuple(sizes[a] for a in s.axes)).astype(np.float16)
           for s in d.inputs}
    (want,) = napkin.run(d, backend="reference", **ins)
    assert_close(run_plan(p, ins, sizes)["R"], want, "f16")
