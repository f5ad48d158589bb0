"""Runs of three or more contracted axes merged for one product (compiler/local_merge.py,
read before canonical.py nests a contraction over three axes), and the gradient's products
over a run of axes both loaded factors share (compiler/grad.py): the emitted CUDA (emulator)
and the interpreter against float64 oracles written here, at odd sizes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import napkin
from napkin.compiler import ir
from napkin.compiler.plan import fuse_kernels, plan, prepare, tile
from napkin.compiler.schedule import PRODUCT, SIMT
from napkin.pipeline import run_plan

from ..runtime.close import assert_close

# three contracted axes g h d, beside a use of them no merge follows (Q's h before t)
RUN = """axis b, t, m, g, h, d
in X[b t m]: {dt}
in A[{a}]: {dt}
in Q[b h t g d]: {dt}
in W[{w}]: {dt}
R[b t m] = X + A * W
P[b h t g d] = Q * 2
out R: {dt}
out P: {dt}
"""
SMALL = dict(b=3, t=37, m=40, g=2, h=3, d=16)


def _text(a="b t g h d", w="g h d m", dt="f16"):
    return RUN.format(a=a, w=w, dt=dt)


def _inputs(rng, a="b t g h d", w="g h d m", sizes=SMALL):
    def one(axes, scale=1.0):
        return (rng.standard_normal(tuple(sizes[x] for x in axes.split())) * scale
                ).astype(np.float16)
    k = sizes["g"] * sizes["h"] * sizes["d"]
    return dict(X=one("b t m"), A=one(a), Q=one("b h t g d"), W=one(w, k ** -0.5))


def _want(ins, a="b t g h d", w="g h d m"):
    x, A, W = (ins[k].astype(np.float64) for k in ("X", "A", "W"))
    spec = f"{a.replace(' ', '')},{w.replace(' ', '')}->btm"
    return x + np.einsum(spec, A, W)


def _reshapes(g) -> list:
    return [ir.type_of(g, n).axes for n in ir.order(g) if isinstance(ir.op(g, n), ir.Reshape)]


def _contractions(g) -> list:
    return [ir.op(g, n).axes for n in ir.order(g) if isinstance(ir.op(g, n), ir.Contract)]


def test_three_adjacent_contracted_axes_are_one():
    """`A[b t g h d] * W[g h d m]`: one product over (g*h*d), not contract[d] summed over
    g h (canonical's nesting, which ran first)."""
    g = prepare(napkin.load(_text()), "h100", SMALL).graph
    assert _contractions(g) == [("(g*h*d)",)]
    assert _reshapes(g) == [("b", "t", "(g*h*d)"), ("(g*h*d)", "m")]
    assert g.graph["axes"]["(g*h*d)"].merged == ("g", "h", "d")
    assert not any(isinstance(ir.op(g, n), ir.Reduce) for n in g)


def test_a_run_beside_a_kept_axis_nests_around_it():
    """`A[b g t h d]`: g is apart from h d (t between): the product runs over (h*d) and a sum
    takes g, as canonical nests a contraction; explain names the inner product."""
    g = prepare(napkin.load(_text(a="b g t h d")), "h100", SMALL).graph
    assert _contractions(g) == [("(h*d)",)]
    (c,) = [n for n in g if isinstance(ir.op(g, n), ir.Contract)]
    assert [(m, axis) for m, axis, _ in g.graph["local_merged"]] == [(c, "(h*d)")]
    sums = [ir.op(g, n).axes for n in g if isinstance(ir.op(g, n), ir.Reduce)]
    assert sums == [("g",)]


def _merged_plan(d, sizes, engine="auto", fusion=True):
    """The plan of d's IR with its products' own merges (local_merge.py), whatever the
    pricing would keep at these small sizes."""
    problem = prepare(d, "h100", sizes)
    while problem.unmerged is not None and not problem.graph.graph.get("local_merged"):
        problem = problem.unmerged
    return tile(fuse_kernels(replace(problem, unmerged=None), engine=engine, fusion=fusion))


@pytest.mark.parametrize("a", ["b t g h d", "b g t h d"])
def test_merged_runs_agree_with_the_oracle(rng, a):
    """The merged product on the tensor cores, emulated CUDA and the interpreter, odd t, m,
    h and batch; the run whole, and (h*d) beside g summed after (in a kernel of its own:
    fused with the sum over g, the planner keeps it on the CUDA cores at these sizes)."""
    from napkin.runtime.interpret import interpret
    whole = a == "b t g h d"
    p = _merged_plan(napkin.load(_text(a)), SMALL, *(() if whole else ("tensor-cores", False)))
    reduced = "(g*h*d)" if whole else "(h*d)"
    assert [k.schedule.engine for k in p.kernels if reduced in k.model.reduced] == [PRODUCT]
    ins = _inputs(rng, a)
    for out in (run_plan(p, ins, SMALL), interpret(p, ins)):
        assert_close(out["R"], _want(ins, a), "f16", slack=16.0)
        assert_close(out["P"], 2 * ins["Q"].astype(np.float64), "f16")


def test_a_computed_operand_stays_apart_from_the_nested_product(rng):
    """`B = tanh(A)` read through a reshape by the product over (h*d), which nesting moved to
    a statement of its own: `apart` names that statement (fusion never computes B in the
    kernel that reshapes it), and the plan agrees."""
    text = _text("b g t h d").replace("R[b t m] = X + A * W",
                                      "B[b g t h d] = tanh(A)\nR[b t m] = X + B * W")
    p = _merged_plan(napkin.load(text), SMALL)
    g = p.graph
    pairs = {(g.nodes[u]["stmt"], g.nodes[r]["stmt"]) for r in g
             if isinstance(ir.op(g, r), ir.Reshape) for u in ir.operands(g, r)
             if g.nodes[u]["stmt"] is not None}
    assert pairs and set(g.graph["apart"]) == pairs
    ins = _inputs(rng, "b g t h d")
    want = _want(dict(ins, A=np.tanh(ins["A"].astype(np.float64))), "b g t h d")
    assert_close(run_plan(p, ins, SMALL)["R"], want, "f16", slack=16.0)


def test_a_merged_run_on_cuda_cores_agrees(rng):
    """The merged IR's product on the CUDA cores (the scalar emitter's reshape), built here."""
    sizes = dict(b=1, t=19, m=24, g=2, h=3, d=8)
    p = _merged_plan(napkin.load(_text()), sizes, engine="cuda-cores")
    assert [k.schedule.engine for k in p.kernels if "(g*h*d)" in k.model.reduced] == [SIMT]
    ins = _inputs(rng, sizes=sizes)
    assert_close(run_plan(p, ins, sizes)["R"], _want(ins), "f16", slack=16.0)


def test_a_run_in_two_orders_is_not_merged_and_agrees(rng):
    """`W[g d h m]`: no two contracted axes are adjacent in one order in both operands."""
    g = prepare(napkin.load(_text(w="g d h m")), "h100", SMALL).graph
    assert not _reshapes(g)
    ins = _inputs(rng, w="g d h m")
    R, _ = napkin.run(_text(w="g d h m"), backend="emulate", **ins)
    assert_close(R, _want(ins, w="g d h m"), "f16", slack=16.0)


def test_f32_runs_stay_unmerged():
    """f32 operands take no tensor cores: the merged IR is not faster, the axes stay."""
    p = plan(napkin.load(_text(dt="f32")), "h100", dict(b=2, t=1024, m=1024, g=2, h=4, d=64))
    assert not _reshapes(p.graph)


def test_three_axes_at_a_block_shape_are_one_tensor_core_product():
    """b=2 t=m=2048 g=4 h=4 d=128 on h100 (model): the projection over (g*h*d) is one
    tensor-core kernel, and explain says so."""
    from napkin.explain import render_text, report
    p = plan(napkin.load(_text()), "h100", dict(b=2, t=2048, m=2048, g=4, h=4, d=128))
    (k,) = [k for k in p.kernels if "(g*h*d)" in k.model.reduced]
    assert k.schedule.engine == PRODUCT
    assert "contracts g h d as one axis (g*h*d) in this kernel" in render_text(
        report(p, compare=False))


# ---- the gradient's products over a run of axes both loaded factors share ---------------

PROJ = """axis b, t, m, h, d
in X[b t m]: f16
in A[{a}]: f16
in Q[b h t d]: f16
in Wo[h d m]: f16
R[b t m] = X + A * Wo
P[b h t d] = Q * 2
out R: f16
out P: f16
"""


def test_the_gradient_writes_one_product_over_a_shared_run():
    """dWo sums b t, adjacent in dR[b t m] and A[b t h d]: one product (no dWo_b partial);
    A[t b h d] holds them in the other order: the partial over t and a sum over b stay."""
    lines = napkin.grad(napkin.load(PROJ.format(a="b t h d"))).source.text.splitlines()
    assert "dWo[h d m] = dR * A" in lines
    assert not any(line.startswith("dWo_") for line in lines)
    lines = napkin.grad(napkin.load(PROJ.format(a="t b h d"))).source.text.splitlines()
    assert "dWo[h d m] = sum[b](dWo_b)" in lines


def test_a_product_named_and_stored_keeps_its_runs_as_one_axis():
    """dA[b t h d] = dR[b t m] * Wo[h d m] at d=16 on h100 (model): its rows (b*t) and
    columns (h*d) one axis each, a 64 x 64 tile where d alone gave 16; an array another
    statement reads keeps its axes."""
    from napkin.explain import render_text, report
    grad = napkin.grad(napkin.load(PROJ.format(a="b t h d")))
    p = plan(grad, "h100", dict(b=2, t=2048, m=2048, h=32, d=16))
    (k,) = [k for k in p.kernels if k.model.reduced == ("m",)]
    assert k.schedule.engine == PRODUCT
    g = p.graph
    assert ir.type_of(g, g.graph["outputs"]["dA"]).axes == ("(b*t)", "(h*d)")
    assert "keeps h d as one axis (h*d) in this kernel" in render_text(report(p, compare=False))
    read = PROJ.format(a="b t h d").replace("P[b h t d] = Q * 2", "P[b h t d] = Q * 2\n"
                                            "C[b t h d] = X * Wo\nE[b t h d] = C * 2")
    read = read.replace("out P: f16", "out P: f16\nout C: f16\nout E: f16")
    g = prepare(napkin.load(read), "h100", dict(b=2, t=64, m=64, h=4, d=16)).graph
    assert ir.type_of(g, g.graph["outputs"]["C"]).axes == ("b", "t", "h", "d")


def test_the_backward_projection_at_the_block_shape():
    """b=2 t=m=2048 h=16 d=128 on h100 (model): dWo is one tensor-core product over (b*t)
    read through reshapes (Q keeps b and t apart in the rest of the diagram)."""
    from napkin.explain import render_text, report
    grad = napkin.grad(napkin.load(PROJ.format(a="b t h d")))
    p = plan(grad, "h100", dict(b=2, t=2048, m=2048, h=16, d=128))
    (k,) = [k for k in p.kernels if k.model.reduced == ("(b*t)",)]
    assert k.schedule.engine == PRODUCT
    assert all(k.schedule.engine == PRODUCT for k in p.kernels if k.model.reduced)
    assert "contracts b t as one axis (b*t) in this kernel" in render_text(
        report(p, compare=False))


@pytest.mark.parametrize("a, engine", [("b t h d", "auto"),
                                       pytest.param("t b h d", "auto", marks=pytest.mark.thorough),
                                       ("b t h d", "cuda-cores")])   # (unmerged: 2.5 CPU-s)
def test_the_gradient_agrees_with_the_oracle(rng, a, engine):
    """The backward projection emulated at odd sizes against float64 einsums: dWo over (b*t)
    through reshapes (the merged IR planned here: at these sizes the planner may keep the
    user's axes), dA and dWo stored over (h*d) (and dA over (b*t)), on the tensor cores and
    on the CUDA cores; in the other order, dWo's partial and its sum."""
    sizes = dict(b=3, t=37, m=40, h=3, d=16)
    grad = napkin.grad(napkin.load(PROJ.format(a=a)))
    one = lambda axes, s=1.0: (rng.standard_normal(   # noqa: E731
        tuple(sizes[x] for x in axes.split())) * s).astype(np.float16)
    ins = dict(X=one("b t m"), A=one(a), Q=one("b h t d"), Wo=one("h d m", 48 ** -0.5),
               dR=one("b t m"), dP=one("b h t d"))
    p = _merged_plan(grad, sizes, engine)
    merged = [axis for _, axis, _ in p.graph.graph["local_merged"]]
    assert ("(b*t)" in merged) == (a == "b t h d") and "(h*d)" in merged
    if a == "b t h d":
        want = PRODUCT if engine == "auto" else SIMT
        assert [k.schedule.engine for k in p.kernels if "(b*t)" in k.model.reduced] == [want]
    out = run_plan(p, ins, sizes)
    A, Wo, dR = (ins[k].astype(np.float64) for k in ("A", "Wo", "dR"))
    spec = a.replace(" ", "")
    assert_close(out["dWo"], np.einsum(f"btm,{spec}->hdm", dR, A), "f16", slack=16.0)
    assert_close(out["dA"], np.einsum(f"btm,hdm->{spec}", dR, Wo), "f16", slack=16.0)
    assert_close(out["dX"], dR, "f16")
