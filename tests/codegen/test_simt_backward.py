"""Attention's backward fused on the CUDA cores: a first pass over the keys finishes the
output O (its head split across the lanes, each lane holding its own values of d), a second
pass folds dQ (also split along d) from dS, which reads D = sum[d](dO * O) of every d
(codegen/accum.update hoists what dS needs out of the lanes' trips along d). Run on the
emulator at odd sizes (under the address sanitizer in the thorough tier), against the float64
reference."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.runtime import compare, reference

from .conftest import emulate_buffers


@pytest.mark.parametrize("name, shape, sanitize", [
    ("causal_attention", dict(b=2, h=1, q=17, x=21), "none"),
    # (under the address sanitizer: 4 CPU-s more, the thorough tier's)
    pytest.param("causal_attention", dict(b=2, h=1, q=17, x=21), "address",
                 marks=pytest.mark.thorough),
    pytest.param("alibi_attention", dict(b=1, h=2, q=17, x=21), "address",
                 marks=pytest.mark.thorough),
])
def test_two_pass_backward_reads_the_whole_output_row(name, shape, sanitize):
    g = napkin.grad(napkin.load(name))
    # (d over 16 lanes: over 64, two warps, the planner streams d instead, and over 32 it now
    # takes the first kernel in one pass over x (since the small-shape counts of 2026-12-07:
    # launched blocks, replicated stores); x in chunks of 8: unpinned, the planner
    # takes three kernels at these sizes, the first one pass over x, since each lane loop's
    # reads and every block's entry are charged)
    p = plan(g, "h100", shape, {"lanes": {"d": 16}, "stream": {"x": 8}}, engine="cuda-cores")
    k0 = p.kernels[0]
    # the case: two passes over x, the lanes splitting d, dQ folded in the second pass
    assert k0.model.streaming.axis == "x" and k0.model.streaming.passes == 2 and k0.schedule.split[0] == "d", k0.schedule.split
    inputs = random_inputs(g, shape, 3)
    out = emulate_buffers(p, inputs, p.sizes, sanitize=sanitize)
    ref = reference.evaluate(g, inputs)
    low = reference.evaluate(g, inputs, precision="lowp")
    for s in g.outputs:
        assert np.isfinite(out[s.name]).all(), s.name
        verdict = compare.check(out[s.name], ref[s.name], low[s.name], s.dtype, s.name)
        assert verdict.ok, verdict.message
