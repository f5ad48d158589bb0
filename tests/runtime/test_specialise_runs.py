"""One Kernel, two head sizes: each call's plan specialises its own head (compiler/specialise.py).

The emitted CUDA runs on the CPU emulator against the float64 reference at small odd sizes
(b=1 h=2 q=37 x=45): d = 16 and d = 32 through the same Kernel object give two plans, each
FlashAttention fixed at its size, and two correct results; d = 24 (no 16-wide fragments)
falls back to a dynamic plan and is correct too; a specialised plan run at another head
size is refused (N0308) rather than run.
"""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.schedule import ATTENTION
from napkin.kernel import Kernel
from napkin.pipeline import Options, run_plan

from ..compiler.test_specialise import DYNAMIC, SMALL


def _inputs(rng, head):
    return {name: rng.standard_normal((1, 2, n, head)).astype(np.float16)
            for name, n in (("Q", 37), ("K", 45), ("V", 45))}


def test_one_kernel_two_head_sizes_two_specialised_kernels(rng, within_budget):
    d = napkin.load(DYNAMIC)
    kernel = Kernel(d, Options.make(target="h100"), backend="emulate")
    plans = {}
    for head in (16, 32):
        inputs = _inputs(rng, head)
        (out,) = kernel(**inputs)
        p = kernel.plan
        assert p.specialised == {"d": head} and p.kernels[0].schedule.engine == ATTENTION
        assert p.kernels[0].schedule.site.head == head
        within_budget(d, inputs, {"O": out}, plan=p)
        plans[head] = p
    assert plans[16] is not plans[32]
    assert kernel.compiled_for({**SMALL, "d": 16})[0] is plans[16]     # (compiled once each)
    assert "d specialised at 32" in kernel.explain()
    # the d = 16 plan at d = 32: refused, not run at the wrong size
    with pytest.raises(napkin.NapkinError, match="N0308"):
        run_plan(plans[16], _inputs(rng, 32), {**SMALL, "d": 32})


def test_a_head_the_fragments_cannot_take_falls_back_and_is_correct(rng, within_budget):
    d = napkin.load(DYNAMIC)
    kernel = Kernel(d, Options.make(target="h100"), backend="emulate")
    inputs = _inputs(rng, 24)
    (out,) = kernel(**inputs)
    assert kernel.plan.specialised == {} and kernel.plan.diagram.axes["d"] is None
    within_budget(d, inputs, {"O": out}, plan=kernel.plan)


@pytest.mark.thorough
def test_gradients_of_a_dynamic_head_run_specialised(rng, within_budget):
    g = napkin.grad(DYNAMIC)
    kernel = Kernel(g, Options.make(target="h100"), backend="emulate")
    inputs = {**_inputs(rng, 16), "dO": rng.standard_normal((1, 2, 37, 16)).astype(np.float16)}
    outs = kernel(**inputs)
    p = kernel.plan
    assert p.specialised == {"d": 16} and ATTENTION in [k.schedule.engine for k in p.kernels]
    within_budget(g, inputs, {s.name: o for s, o in zip(g.outputs, outs)}, plan=p)
