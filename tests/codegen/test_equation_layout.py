"""An elementwise op over exactly the axes its equation's left-hand side lists takes that
layout (compiler/build._layout): broadcasting orders axes as the operands first name them,
so `softmax[x](where(q >= x, S, -inf))` was a softmax over [q x b h] and `P[b h q x]` a
reordering name, which the analyses that look through names (through: a softmax's one
contraction, FlashAttention's operands) do not see through. The causal mask written inside
the softmax's argument planned three kernels (S, P through global memory: 600 us, model,
h100, b=2 h=16 q=x=2048 e=128) where the library's spelling plans FlashAttention-2
(95.8 us). Run by the interpreter and the CPU emulator against the float64 reference."""

from __future__ import annotations

import napkin
import pytest
from napkin.compiler import ir
from napkin.compiler.canonical import through
from napkin.compiler.plan import plan

from .test_tensor_cores import assert_close

MASK_IN_SOFTMAX = """axis b, h, q, x
axis e = 64
in Q[b h q e]: f16
in K[b h x e]: f16
in V[b h x e]: f16
S[b h q x] = Q * K / sqrt(size(e))
P[b h q x] = softmax[x](where(q >= x, S, -inf))
O[b h q e] = P * V
out O: f16
"""
BIG = {"b": 2, "h": 16, "q": 2048, "x": 2048}


def _maps(g):
    return {ir.op(g, n).fn: ir.type_of(g, n).axes for n in g.nodes
            if isinstance(ir.op(g, n), ir.Map)}


def test_an_op_over_the_left_hand_sides_axes_takes_its_layout():
    """where(q >= x, S, -inf) is [b h q x] as P is (broadcast, [q x b h]), the softmax over
    it too, so P's name is the softmax's; an op over other axes keeps the operands' order
    (q >= x stays [q x]), and so does a name that transposes (`Y[c r] = X[r c]`)."""
    g = napkin.load(MASK_IN_SOFTMAX).ir
    maps = _maps(g)
    assert maps["where"] == ("b", "h", "q", "x") and maps["ge"] == ("q", "x")
    (p,) = [n for n in g.nodes if isinstance(ir.op(g, n), ir.Assign) and ir.op(g, n).name == "P"]
    assert isinstance(ir.op(g, through(g, p)), ir.Softmax)
    g = napkin.load("axis r, c\nin X[r c]: f32\nin w[c]: f32\nY[c r] = X * (w + 1.0)\n"
                    "Z[c r] = X\nout Y: f32\nout Z: f32\n").ir
    maps = _maps(g)
    assert maps["mul"] == ("c", "r") and maps["add"] == ("c",)
    (z,) = [n for n in g.nodes if isinstance(ir.op(g, n), ir.Assign) and ir.op(g, n).name == "Z"]
    assert through(g, z) == z


def test_a_mask_inside_the_softmax_plans_flashattention_as_the_librarys_spelling():
    d = napkin.load(MASK_IN_SOFTMAX)
    p = plan(d, "h100", BIG)
    (kp,) = p.kernels
    assert kp.schedule.engine == "attention"
    library = plan(napkin.load("causal_attention"), "h100", BIG)
    assert kp.cost.time == pytest.approx(library.kernels[0].cost.time, rel=1e-9)


@pytest.mark.parametrize("shape", [{"b": 1, "h": 2, "q": 37, "x": 70},
                                   {"b": 2, "h": 1, "q": 64, "x": 17}])
def test_a_mask_inside_the_softmax_matches_the_reference_on_tensor_cores(shape):
    d = napkin.load(MASK_IN_SOFTMAX)
    p = plan(d, "h100", BIG)
    assert p.kernels[0].schedule.engine == "attention"
    assert_close(d, p, shape)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_ops_in_the_left_hand_sides_layout_match_the_reference(backend, rng):
    """Elementwise ops reordered to the equation's layout, stored transposed and beside a
    reduction reading them, on the CUDA cores, against float64."""
    import numpy as np
    from napkin.runtime import compare
    text = ("axis r, c\nin X[r c]: f32\nin w[c]: f32\n"
            "Y[c r] = where(c < r, X, 0.0) * w\n"
            "L[r] = logsumexp[c](where(r >= c, X * w, -inf))\nout Y: f32\nout L: f32\n")
    d = napkin.load(text)
    x = rng.standard_normal((37, 130)).astype(np.float32)
    w = rng.standard_normal(130).astype(np.float32)
    out = napkin.run(d, x, w, backend=backend)
    inputs = {"X": x, "w": w}
    verdicts = compare.against_reference(d, inputs, dict(zip(("Y", "L"), out)))
    for name, v in verdicts.items():
        assert v.ok, (name, v.message)
