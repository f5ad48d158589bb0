"""Every library diagram in f32, f16 and bf16, emitted as CUDA and run by the CPU emulator.

Compared with the float64 reference under the tolerance rule of testing.md
(max error at most twice a naive low-precision evaluation's, plus a floor),
NaN and infinities in the same places, on shapes with tails.
"""

from __future__ import annotations

import pytest

from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names
from napkin.runtime import compare, reference
from napkin.runtime.emulated import run_plan

from .conftest import library, shape_of


def check(d, shape, seed=0, target="h100", **plan_kw):
    inputs = random_inputs(d, shape, seed)
    p = plan(d, target, shape, **plan_kw)
    out = run_plan(p, inputs, p.sizes)
    ref = reference.evaluate(d, inputs)
    low = reference.evaluate(d, inputs, precision="lowp")
    for s in d.outputs:
        verdict = compare.check(out[s.name], ref[s.name], low[s.name], s.dtype, s.name)
        assert verdict.ok, verdict.message
    return p


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("name", library_names())
def test_library_diagram_emulated(name, dtype):
    d = library(name, dtype)
    check(d, shape_of(d))


@pytest.mark.parametrize("q, x", [(1, 1), (7, 9), (256, 257)])
def test_attention_at_tile_edges(q, x):
    d = library("attention", "f16")
    check(d, shape_of(d, q=q, x=x, b=1, h=2))


def test_causal_attention_with_fewer_queries_than_keys():
    d = library("causal_attention", "bf16")
    check(d, shape_of(d, q=5, x=70, b=1, h=1))
