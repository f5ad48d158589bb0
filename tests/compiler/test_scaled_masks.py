"""A mask under a positive scale (`softmax[x](where(x <= q, S, -inf) / 8)`: -inf scaled is
-inf) is the mask (masking.masked_by looks through the scale, masking.unscaled): the
attention kernel skips the chunks it hides, as when the scale is inside the `where`
(35.8 us against 18.8 us at b=4 h=8 N=1024, h100, model); emulated at sizes where chunks
are skipped, against the float64 oracle."""

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
O[b h q d] = softmax[x](where(x <= q, S, -inf) SCALE) * V
out O: f16
"""


@pytest.mark.parametrize("scale", ["/ 4", "* 0.25"])
def test_a_scaled_mask_skips_chunks(scale):
    d = napkin.load(TEXT.replace("SCALE", scale))
    p = plan(d, "h100", {"b": 4, "h": 8, "q": 1024, "x": 1024})
    (kp,) = p.kernels
    assert kp.model.mask == ("le", ("index", "x"), ("index", "q"))
    assert kp.cost.computed < 0.6, kp.cost.computed


@pytest.mark.thorough       # (g++ builds the kernel: about 2.5 CPU-s)
def test_a_scaled_mask_emulated_where_chunks_are_skipped(within_budget):
    d = napkin.load(TEXT.replace("SCALE", "/ 4"))
    shape = {"b": 1, "h": 2, "q": 70, "x": 70}
    p = plan(d, "h100", shape, {"stream": {"x": 16}, "group": {"q": 16}})
    assert p.kernels[0].model.mask is not None
    inputs = random_inputs(d, shape, 9)
    within_budget(d, inputs, run_plan(p, inputs, shape), p)
