"""A causal mask however it is written is the mask: under a positive scale
(`where(x <= q, S, -inf) / 8`: -inf scaled is -inf; masking.unscaled), with its branches
swapped or its condition negated (`where(x > q, -inf, S)`, `where(not (x > q), S, -inf)`:
canonical._constant_last), or added (`S + where(x <= q, 0, -inf)`, for finite scores:
masking._minus_infinity_unless); a window both ways read through `abs` (canonical._abs_bound). The attention kernel skips the chunks it hides, as for the
library's spelling (each 35.8 to 42.3 us against 18.4 to 23.2 us at b=4 h=8 N=1024, h100,
model); emulated at sizes where chunks are skipped, against the float64 oracle."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan

TEXT = """axis b, h, q, x
axis d = 16
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = Q * K
O[b h q d] = softmax[x](SCORES) * V
out O: f16
"""
SPELLINGS = {"divided": "where(x <= q, S, -inf) / 4",
             "multiplied": "where(x <= q, S, -inf) * 0.25",
             "swapped": "where(x > q, -inf, S / 4)",
             "negated": "where(not (x > q), S / 4, -inf)",
             "added": "S / 4 + where(x <= q, 0, -inf)"}
WINDOW = "where(abs(q - x) < 16, S / 4, -inf)"      # (emulated below too)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_mask_however_written_skips_chunks(spelling):
    d = napkin.load(TEXT.replace("SCORES", SPELLINGS[spelling]))
    p = plan(d, "h100", {"b": 4, "h": 8, "q": 1024, "x": 1024})
    (kp,) = p.kernels
    assert kp.model.mask == ("le", ("index", "x"), ("index", "q"))
    assert kp.cost.computed < 0.6, kp.cost.computed


@pytest.mark.parametrize("window", ["abs(q - x) < 64", "64 > abs(x - q)"])
def test_a_window_both_ways_with_abs_skips_chunks(window):
    """`abs(q - x) < 64` (canonical._abs_bound: both comparisons): no chunk was skipped
    (171 us against 26.1 us for a window of 128 at b=4 h=8 N=2048, h100, model)."""
    d = napkin.load(TEXT.replace("SCORES", f"where({window}, S / 4, -inf)"))
    p = plan(d, "h100", {"b": 4, "h": 8, "q": 1024, "x": 1024})
    (kp,) = p.kernels
    assert kp.model.mask is not None and kp.model.mask[0] == "and", kp.model.mask
    assert kp.cost.computed < 0.3, kp.cost.computed


def test_a_float_comparison_is_not_negated():
    """`not (S > 0)` is not `S <= 0` where S is NaN: the swap keeps the condition."""
    from napkin.compiler import ir
    from napkin.compiler.canonical import canonicalize
    d = napkin.load(TEXT.replace("SCORES", "where(S > 0, -inf, S)"))
    g = canonicalize(d.ir)
    assert not any(isinstance(ir.op(g, n), ir.Map) and ir.op(g, n).fn == "le" for n in g)
    d = napkin.load(TEXT.replace("SCORES", "where(abs(S) < 1, S, -inf)"))     # nor bounded
    g = canonicalize(d.ir)
    assert any(isinstance(ir.op(g, n), ir.Map) and ir.op(g, n).fn == "abs" for n in g)


@pytest.mark.thorough       # (g++ builds each kernel: about 2.5 CPU-s)
@pytest.mark.parametrize("spelling", list(SPELLINGS) + ["window"])
def test_a_mask_however_written_emulated_where_chunks_are_skipped(spelling, within_budget):
    d = napkin.load(TEXT.replace("SCORES", SPELLINGS.get(spelling, WINDOW)))
    shape = {"b": 1, "h": 2, "q": 70, "x": 70}
    p = plan(d, "h100", shape, {"stream": {"x": 16}, "group": {"q": 16}})
    assert p.kernels[0].model.mask is not None
    inputs = random_inputs(d, shape, 9)
    within_budget(d, inputs, run_plan(p, inputs, shape), p)


def test_explain_writes_a_compound_operand_in_parentheses():
    """masking.describe wrote `x <= q - (size(q) - 5)` as `x <= q - size(q) - 5` and
    `-(q - x)` as `-q - x`: other masks than the diagram's."""
    from napkin.compiler.masking import describe
    q, x, size = ("index", "q"), ("index", "x"), ("size", "q")
    five = ("const", 5.0)
    assert describe(("le", x, ("sub", q, ("sub", size, five))))[0] == "x <= q - (size(q) - 5)"
    assert describe(("lt", ("neg", ("sub", q, x)), five))[0] == "-(q - x) < 5"
    assert describe(("le", x, ("mul", ("const", 2.0), ("add", q, five))))[0] == "x <= 2 * (q + 5)"
    assert describe(("le", x, ("add", ("sub", q, five), size)))[0] == "x <= q - 5 + size(q)"
