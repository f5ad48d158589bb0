"""N0810's messages say why an input has no gradient and which inputs have one."""

from __future__ import annotations

import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError

LOOKUP = "axis t, v, m\nin E[v m]: f32\nin tok[t]: i32\nY[t m] = E[tok[t] m]\nout Y: f32\n"
ROUNDED = "axis i\nin W[i]: f32\nY[i] = float(int(W * 3.0))\nout Y: f32\n"


def _n0810(text, wrt=None):
    with pytest.raises(NapkinError) as exc:
        napkin.grad(napkin.load(text), wrt=wrt)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0810"
    return diag


def test_an_integer_input_names_the_inputs_that_have_a_gradient():
    diag = _n0810(LOOKUP, ("tok",))
    assert "not a floating-point input" in diag.message and diag.help == "differentiable inputs: E"


def test_an_output_reached_only_through_an_integer_is_said_so():
    diag = _n0810(ROUNDED)
    assert "differentiably" in diag.message and "int(...)" in diag.help
    diag = _n0810(ROUNDED, ("W",))
    assert "only through integers" in diag.message


def test_the_gradient_says_the_forwards_hints_are_not_carried():
    text = napkin.grad(napkin.load("axis r, c\nin X[r c]: f32\nY[r] = sum[c](X * X)\n"
                                   "split c by 4\nout Y: f32\n")).source.text
    assert "# The forward's hints (split c by 4) are not carried over" in text
    assert "split" not in text.split("are not carried over")[1].split("\n", 1)[1]
    assert "not carried" not in napkin.grad(napkin.load(ROUNDED.replace("int(W * 3.0)",
                                                                        "W * 3.0"))).source.text
