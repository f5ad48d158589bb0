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


INPUT_RENAMED = """axis t, s, m, o
in X[t m]: f16
in W[m o]: f16
in U[m o]: f16
T[s m] = X[s m]
A[s o] = T * W
B[s o] = T * U
out A: f16, B: f16
"""


def test_a_renamed_copy_of_an_input_is_read_as_the_input():
    """`T[s m] = X[s m]` was a kernel copying X into an f32 T, whose products then ran on the
    CUDA cores (416 us at s=2048 m=o=1024, model h100; 26.5 us read through the view, on the
    tensor cores). A's and B's statements read X through views of their own."""
    d = napkin.load(INPUT_RENAMED)
    p = plan(d, "h100", {"t": 2048, "s": 2048, "m": 1024, "o": 1024})
    assert not any("T" in names for names in _names(p)), _names(p)
    assert rename.said(p.graph) == ["T is X[s m]: its readers read X through that renaming "
                                    "(no copy)"]
    assert p.time < 100e-6, p.time
    from napkin.commands.run import random_inputs
    small = plan(d, "h100", {"t": 37, "s": 37, "m": 29, "o": 45})
    for sizes in ({"t": 37, "s": 37, "m": 29, "o": 45}, {"t": 64, "s": 64, "m": 16, "o": 9}):
        inputs = random_inputs(d, sizes, 7)
        out = run_plan(small, inputs, sizes)
        for name, v in compare.against_reference(d, inputs, out, plan=small).items():
            assert v.ok, (name, v.message)


def test_a_renamed_copy_of_an_intermediate_read_otherwise_stays():
    """A copy of an intermediate that others read too may be the 16-bit one its products
    read (the block gradient's `t22[b s m] = N1[b s m]`): it stays a statement."""
    text = INPUT_RENAMED.replace("T[s m] = X[s m]", "Xs[t m] = exp(X)\nT[s m] = Xs[s m]") \
        .replace("out A: f16, B: f16", "C[t m] = Xs * 2.0\nout A: f16, B: f16, C: f16")
    p = plan(napkin.load(text), "h100", {"t": 256, "s": 256, "m": 64, "o": 64})
    assert any("T" in names for names in _names(p)), _names(p)
