"""Canonical forms of computations spelt twice rather than named once (values.same_values):
the variance written without naming `X - mu` (written.variance): `(X - mu) * (X - mu)`
and `(X - mean[c](X)) * (X - mean[c](X))` spell one difference twice, as two nodes of the
same values, and stream in one pass as Welford's variance, so a split of `c` merges partial
states as layernorm's does; a softmax written out without naming its exponentials,
`exp(S - m) * V / sum[x](exp(S - m))`, is attention (written.softmax_parts): one
FlashAttention kernel. Each against the float64 oracle."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler.canonical import canonicalize
from napkin.compiler.flash import FlashSite
from napkin.compiler.plan import plan
from napkin.runtime.interpret import interpret

SPELLINGS = {
    "inlined": "mu[r] = mean[c](X)\nv[r] = mean[c]((X - mu) * (X - mu))\n"
               "Y[r c] = (X - mu) * rsqrt(v + 1e-5)\nout Y: f16, v: f32\n",
    "unnamed": "v[r] = mean[c]((X - mean[c](X)) * (X - mean[c](X)))\nout v: f32\n",
    "squared": "mu[r] = mean[c](X)\nv[r] = mean[c](pow(X - mu, 2))\nout v: f32\n",
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
    for v in ("(X - mu) * (X - 2 * mu)", "(X - mu) ** 3"):
        g = canonicalize(_diagram(f"mu[r] = mean[c](X)\nv[r] = mean[c]({v})\nout v: f32\n").ir)
        assert not any(isinstance(ir.op(g, n), ir.Reduce) and ir.op(g, n).fn == "var"
                       for n in g), v


SOFTMAX = """axis b, q, x
axis d = 16
in Q[b q d]: f16
in K[b x d]: f16
in V[b x d]: f16
S[b q x] = where(x <= q, Q * K / 4, -inf)
O[b q d] = exp(S - max[x](S)) * V / sum[x](exp(S - max[x](S)))
out O: f16
"""


def test_a_softmax_spelt_without_names_is_flash_attention(within_budget):
    d = napkin.load(SOFTMAX)
    shape = {"b": 2, "q": 17, "x": 17}
    p = plan(d, "h100", shape)
    sites = [kp.schedule.site for kp in p.kernels]
    assert len(sites) == 1 and isinstance(sites[0], FlashSite), sites   # without: 3 kernels
    inputs = random_inputs(d, shape, 3)
    within_budget(d, inputs, interpret(p, inputs), p)


LOGSUMEXP = """axis t, v
in Z[t v]: f32
in label[t]: i32
S[t v] = where(t > 2, Z, -inf)
m[t] = max[v](S)
L[t] = m + log(sum[v](exp(S - m))) - S[t label[t]]
out L: f32
"""


def test_a_logsumexp_written_out_is_one_and_splits():
    """`m + log(sum[v](exp(S - m)))` (cross-entropy by hand) is logsumexp[v](S) (written.py):
    a split of v for few long rows, as the library's cross_entropy (186 us unsplit against
    8.29 us at t=8 v=131072, h100, model)."""
    d = napkin.load(LOGSUMEXP)
    g = canonicalize(d.ir)
    assert any(isinstance(ir.op(g, n), ir.Reduce) and ir.op(g, n).fn == "logsumexp" for n in g)
    assert plan(d, "h100", {"t": 3, "v": 37}, {"split": {"v": 4}}).split.parts == 4


def test_a_logsumexp_written_out_keeps_its_nan_on_a_fully_masked_row(within_budget):
    """Rows t <= 2 hold -inf only: exp(S - m) is NaN there, and so stays the result (not
    logsumexp's -inf)."""
    d = napkin.load(LOGSUMEXP.replace(" - S[t label[t]]", ""))
    shape = {"t": 5, "v": 37}
    inputs = random_inputs(d, shape, 2)
    p = plan(d, "h100", shape, {"split": {"v": 4}})
    out = interpret(p, inputs)
    assert np.isnan(out["L"][:3]).all() and np.isfinite(out["L"][3:]).all()
    within_budget(d, inputs, out, p)
