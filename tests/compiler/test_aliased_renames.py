"""An intermediate that only renames another (compiler/rename.py, `_alias`): a gradient's
`dV[h d t] = g21[h t d]` (V's cotangent read back along `t` from the chain's g21[h s d],
whose statement contracts over t and so cannot be computed under the reader's names) was a
kernel copying g21 (5 us each for dV and dK at t=2048 h=8 d=64, model h100). g21 is laid out
in dV's order under its own names, `g21[h d s]`, and dV's readers read it through one
renaming view: the same memory, no copy. Plans asserted, the emulated CUDA at small odd
sizes against the float64 reference."""

from __future__ import annotations

import napkin
from napkin.compiler import ir, rename
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan
from napkin.runtime import compare

TEXT = """axis t, s, h, m
axis d = 16
in P[h s t]: f16
in G[t h d]: f16
in W[m h d]: f16
in X[t m]: f16
B[h s d] = P * G
A[h d t] = B[h t d]
Y[t m] = A * W
Z[m h d] = A * X
out Y: f16
out Z: f16
"""
SHAPE = {"t": 1024, "s": 1024, "h": 4, "m": 512}


def _names(p) -> list[list[str]]:
    eqs = p.graph.graph["equations"]
    return [[e.name for e in eqs if e.stmt in kp.kernel.equations] for kp in p.kernels]


def test_a_renamed_copy_is_read_as_the_array_it_renames():
    d = napkin.load(TEXT)
    p = plan(d, "h100", SHAPE)      # (model h100: 16.7 -> 13.3 us, three products)
    assert not any("A" in names for names in _names(p)), _names(p)
    b = p.graph.graph["arrays"]["B"]
    assert ir.type_of(p.graph, b).axes == ("h", "d", "s")
    assert rename.said(p.graph) == ["A read as B renamed (B laid out [h d s] as A is: no copy)"]
    from napkin.commands.run import random_inputs
    for sizes in ({"t": 37, "s": 37, "h": 3, "m": 24}, {"t": 65, "s": 65, "h": 1, "m": 8}):
        inputs = random_inputs(d, sizes, 5)
        out = run_plan(p, inputs, {**sizes, "d": 16})
        for name, v in compare.against_reference(d, inputs, out, plan=p).items():
            assert v.ok, (name, v.message)


def test_not_where_the_renamed_array_is_read_otherwise_or_an_output():
    """B read by another statement too (its layout serves it), or A an output (its layout is
    the user's): A stays a statement of its own."""
    for text in (TEXT.replace("out Z: f16", "out Z: f16\nC[h s d] = exp(B)\nout C: f16"),
                 TEXT.replace("out Z: f16", "out Z: f16\nout A: f16")):
        p = plan(napkin.load(text), "h100", SHAPE)
        assert any("A" in names for names in _names(p)), _names(p)
        assert ir.type_of(p.graph, p.graph.graph["arrays"]["B"]).axes == ("h", "s", "d")
        assert rename.said(p.graph) == []
