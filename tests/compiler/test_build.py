"""The graph IR: ops, types, the einsum rule's placements, size classes, verify, printer."""

from __future__ import annotations

from napkin.compiler.graph import DiGraph, is_dag
import pytest

import napkin
from napkin.compiler import ir
from napkin.compiler.printer import format_ir
from napkin.compiler.verify import IRInvariantError, verify
from napkin.diagrams.diagnostics import NapkinError
from napkin.diagrams.sources import library_names


def ops(d, kind):
    return [d.ir.nodes[n]["op"] for n in ir.order(d.ir) if isinstance(d.ir.nodes[n]["op"], kind)]


def test_attention_ir():
    d = napkin.load("attention")
    assert [c.axes for c in ops(d, ir.Contract)] == [("d",), ("x",)]
    assert [s.axes for s in ops(d, ir.Softmax)] == [("x",)]
    assert [a.name for a in ops(d, ir.Assign)] == ["S", "P", "O"]
    out = d.ir.graph["outputs"]["O"]
    assert ir.type_of(d.ir, out) == ir.ArrayType(("b", "h", "q", "d"), "f16")
    assert d.ir.graph["axes"]["d"].size == 64


def test_edges_carry_arrays_and_ports():
    d = napkin.load("axis a\nin X[a]: f32\nY[a] = X * X\nout Y: f32")
    g = d.ir
    (mul,) = [n for n in g if isinstance(ir.op(g, n), ir.Map)]
    x = g.graph["inputs"]["X"]
    assert g.edges[x, mul]["ports"] == (0, 1)
    assert g.edges[x, mul]["array"] == ir.ArrayType(("a",), "f32")
    assert ir.operands(g, mul) == [x, x]


@pytest.mark.parametrize("rhs, where", [
    ("A * B * C", 0),          # k in A and C: summed over the whole product
    ("(A * B) * C", 0),
    ("A * (B * C)", 0),
])
def test_contraction_at_the_lowest_common_product(rhs, where):
    d = napkin.load(f"axis i, k\nin A[i k]: f32, B[i]: f32, C[k]: f32\nY[i] = {rhs}\nout Y: f32")
    (c,) = ops(d, ir.Contract)
    assert c.axes == ("k",)


def test_contraction_inside_a_function_and_a_reduction():
    d = napkin.load("axis q, x, d\nin Q[q d]: f32, K[x d]: f32\nM[q] = max[x](exp(Q * K))\nout M: f32")
    g = d.ir
    (c,) = [n for n in g if isinstance(ir.op(g, n), ir.Contract)]
    (e,) = [n for n in g if isinstance(ir.op(g, n), ir.Map) and ir.op(g, n).fn == "exp"]
    assert ir.operands(g, e) == [c]
    assert d.equations[0].contracted == ("d",) and d.equations[0].reduced == ("x",)


def test_separate_contractions_with_renamed_axes():
    d = napkin.load("axis t, m, n, f\nin X[t m]: f16, Wg[m f]: f16, Wu[m f]: f16\n"
                    "H[t f] = silu(X * Wg) * (X[t n] * Wu[n f])\nout H: f16")
    assert sorted(c.axes for c in ops(d, ir.Contract)) == [("m",), ("n",)]
    assert not d.warnings


def test_view_for_renamed_and_diagonal_references():
    d = napkin.load("axis i, j\nin A[i j]: f32\nT[i j] = A[j i] + A[i i]\nout T: f32")
    views = ops(d, ir.View)
    assert [v.labels for v in views] == [("j", "i"), ("i", "i")]


def test_size_classes():
    d = napkin.load("axis s, e, t\nin Kp[s e]: f32, Z[t]: f32\nY[t e] = Kp[t e] * Z\nout Y: f32")
    axes = d.ir.graph["axes"]
    assert axes["s"].rep == axes["t"].rep == "s" and axes["e"].rep == "e"


def test_static_size_flows_through_renaming():
    d = napkin.load("axis s = 8, t\nin Kp[s]: f32\nY[t] = Kp[t]\nout Y: f32")
    assert d.axes == {"s": 8, "t": 8}


def test_overrides():
    d = napkin.load("attention", d=128, q=5)
    assert d.axes["d"] == 128 and d.axes["q"] == 5
    with pytest.raises(NapkinError) as exc:
        napkin.load("attention", e=3)
    assert exc.value.code == "N0209"
    with pytest.raises(NapkinError) as exc:
        napkin.load("attention", d=0)
    assert exc.value.code == "N0304"
    # (the help gives both spellings: this one came from Python, not -D)
    assert "d=128 in napkin.load or napkin.compile" in str(exc.value)


@pytest.mark.parametrize("name", library_names())
def test_library_verifies_and_prints_deterministically(name):
    a, b = napkin.load(name), napkin.load(name)
    verify(a.ir)
    assert format_ir(a.ir) == format_ir(b.ir)
    assert not a.warnings


def test_verify_catches_broken_graphs():
    d = napkin.load("attention")
    g = d.ir.copy()
    (c,) = [n for n in g if isinstance(ir.op(g, n), ir.Contract) and ir.op(g, n).axes == ("d",)]
    g.nodes[c]["type"] = ir.ArrayType(("b", "h", "q", "x", "d"), "f32")
    with pytest.raises(IRInvariantError):
        verify(g)
    g = d.ir.copy()
    u, v = next(iter(g.edges))
    g.add_edge(v, u, array=ir.type_of(g, v), ports=(0,))
    with pytest.raises(IRInvariantError):
        verify(g)


def test_printer_text():
    d = napkin.load("axis a\nin X[a]: f16\nY[a] = exp(X) * 2\nout Y: f16")
    text = format_ir(d.ir)
    assert text.splitlines()[0] == "axes a=?"
    assert "%1 = map exp %0 : [a] f32" in text and "output Y" in text


def test_forward_reference_is_reported_with_its_definition():
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis a\nin X[a]: f32\nY[a] = Z * 2\nZ[a] = X\nout Y: f32")
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0203" and "before it is defined" in diag.message
    assert diag.labels[0].span.line == 4


def test_errors_do_not_cascade():
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis a\nin X[a]: f32\nY[a] = X + W\nZ[a] = Y * 2\nT[a] = Z + Y\nout T: f32")
    assert [d.code for d in exc.value.diagnostics] == ["N0203"]


def test_many_errors_at_once():
    text = "axis a\nin X[a]: f32\nY[a] = X + W\nZ[a] = foo(X)\nT[a] = X[b]\nout T: f32, Q: f16"
    with pytest.raises(NapkinError) as exc:
        napkin.load(text)
    assert [d.code for d in exc.value.diagnostics] == ["N0203", "N0204", "N0201", "N0203"]


def test_graph_is_an_acyclic_digraph():
    d = napkin.load("mlp")
    assert isinstance(d.ir, DiGraph) and is_dag(d.ir)
    for _, data in d.ir.nodes(data=True):
        with pytest.raises(Exception):
            data["op"].__setattr__("name", "x")  # frozen payloads


def test_shared_dtypes_reach_the_ir_and_the_outputs():
    import numpy as np
    d = napkin.load("axis a, b = 3\nin X[a b], W[b]: bf16\nY[a] = sum[b](X * W)\n"
                    "Z[a b] = X\nout Y, Z: f16\n")
    assert [(s.name, s.dtype) for s in d.inputs] == [("X", "bf16"), ("W", "bf16")]
    assert [(s.name, s.dtype) for s in d.outputs] == [("Y", "f16"), ("Z", "f16")]
    rng = np.random.default_rng(3)
    # quarters are exact in bf16 and f16: the reference rounds inputs to their storage dtype
    X, W = rng.integers(-8, 9, (5, 3)) / 4, rng.integers(-8, 9, 3) / 4
    Y, Z = napkin.run(d, X, W, backend="reference")
    np.testing.assert_allclose(Y, (X * W).sum(1), rtol=1e-12)
    np.testing.assert_array_equal(Z, X)


@pytest.mark.parametrize("line, axes", [("m = max[a](X)", "m[b]"), ("s = sum[a b](X * X)", "s[]"),
                                        ("P = X * X", "P[a b]")])
def test_missing_axes_help_lists_the_axes_that_leave_the_box(line, axes):
    """Reduced axes are not among them (the help once suggested `m[a b]` for max[a](X))."""
    with pytest.raises(NapkinError) as exc:
        napkin.load(f"axis a, b = 5\nin X[a b]: f32\n{line}\nout Y: f32\n")
    d = exc.value.diagnostics[0]
    assert d.code == "N0205" and f"`{axes} = ...`" in d.help


@pytest.mark.parametrize("rhs, col, extra", [
    ("sum[c](X) * size(X)", 25, ""),
    ("sum[X](X)", 12, ""),
    ("X[r t]", 12, "`t[r]`"),
])
def test_an_array_named_where_an_axis_goes(rhs, col, extra):
    """`size(X)`, `sum[X](...)` and `X[r t]` (t an integer array: the gather is `X[r t[r]]`)
    named an array where an axis goes and said "undeclared axis" with `declare it: axis X`,
    which would make a second meaning of the name (N0202)."""
    text = f"axis r, c\nin X[r c]: f32\nin t[r]: i32\nY[r] = {rhs}\nout Y: f32\n"
    with pytest.raises(NapkinError) as exc:
        napkin.load(text)
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0208" and "is an array, not an axis" in diag.message
    assert (diag.span.line, diag.span.col) == (4, col) and "declare" not in diag.help
    assert extra in diag.help
