"""The variance written without naming `X - mu` (canonical._variance): `(X - mu) * (X - mu)`
and `(X - mean[c](X)) * (X - mean[c](X))` spell one difference twice, as two nodes of the
same values (values.same_values), and stream in one pass as Welford's variance, so a split
of `c` merges partial states as layernorm's does, against the float64 oracle."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler.canonical import canonicalize
from napkin.compiler.plan import plan
from napkin.runtime.interpret import interpret

SPELLINGS = {
    "inlined": "mu[r] = mean[c](X)\nv[r] = mean[c]((X - mu) * (X - mu))\n"
               "Y[r c] = (X - mu) * rsqrt(v + 1e-5)\nout Y: f16, v: f32\n",
    "unnamed": "v[r] = mean[c]((X - mean[c](X)) * (X - mean[c](X)))\nout v: f32\n",
}


def _diagram(body: str):
    return napkin.load("axis r, c\nin X[r c]: f16\n" + body)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_variance_spelt_without_names_is_welfords(spelling):
    g = canonicalize(_diagram(SPELLINGS[spelling]).ir)
    fns = sorted(ir.op(g, n).fn for n in g if isinstance(ir.op(g, n), ir.Reduce))
    assert "var" in fns and fns.count("mean") <= 1, fns


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_variance_spelt_without_names_splits_and_interprets(spelling, within_budget):
    d = _diagram(SPELLINGS[spelling])
    shape = {"r": 3, "c": 37}
    inputs = random_inputs(d, shape, 5)
    p = plan(d, "h100", shape, {"split": {"c": 4}})     # N0607 while it read the mean
    assert p.split is not None and p.split.parts == 4
    within_budget(d, inputs, interpret(p, inputs), p)


def test_a_difference_of_other_values_is_no_variance():
    d = _diagram("mu[r] = mean[c](X)\nv[r] = mean[c]((X - mu) * (X - 2 * mu))\nout v: f32\n")
    g = canonicalize(d.ir)
    assert not any(isinstance(ir.op(g, n), ir.Reduce) and ir.op(g, n).fn == "var" for n in g)
