"""One Kernel, two head sizes: each call's plan specialises its own head (compiler/specialise.py).

The emitted CUDA runs on the CPU emulator against the float64 reference at small odd sizes
(b=1 h=2 q=37 x=45): d = 16 and d = 32 through the same Kernel object give two plans, each
FlashAttention fixed at its size, and two correct results; d = 40 (no multiple of 16) is
specialised too, its head padded to 48 in shared memory (compiler/headpad.py), and is
correct; a specialised plan run at another head size is refused (N0308) rather than run.
"""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin import pipeline
from napkin.compiler import headpad, ir, specialise
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION, TENSOR_ENGINES
from napkin.explain import report
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


def test_a_head_of_40_is_specialised_padded_and_correct(rng, within_budget):
    """A dynamic d given as 40 (Stable Diffusion's head): FlashAttention at d = 40, Q K over
    a head padded to 48 with zeros, against float64 at odd sizes."""
    d = napkin.load(DYNAMIC)
    kernel = Kernel(d, Options.make(target="h100"), backend="emulate")
    inputs = _inputs(rng, 40)
    (out,) = kernel(**inputs)
    p = kernel.plan
    assert p.specialised == {"d": 40} and p.kernels[0].schedule.engine == ATTENTION
    assert headpad.head_tile(p.kernels[0].schedule.site) == 48
    within_budget(d, inputs, {"O": out}, plan=p)


@pytest.mark.thorough
def test_gradients_of_a_dynamic_head_run_specialised(rng, within_budget):
    g = napkin.grad(DYNAMIC)
    kernel = Kernel(g, Options.make(target="h100"), backend="emulate")
    inputs = {**_inputs(rng, 16), "dO": rng.standard_normal((1, 2, 37, 16)).astype(np.float16)}
    outs = kernel(**inputs)
    p = kernel.plan
    # (on tensor cores: FlashAttention, or at these sizes the chains of the gradient with dQ
    # beside the logsumexp on the CUDA cores, which the exchange move finds cheaper)
    assert p.specialised == {"d": 16} and \
        any(k.schedule.engine in TENSOR_ENGINES for k in p.kernels)
    within_budget(g, inputs, {s.name: o for s, o in zip(g.outputs, outs)}, plan=p)


CHAIN = """axis t, i, f, o
in X[t i]: f16
in W1[i f]: f16
in W2[f o]: f16
H[t f] = gelu(X * W1)
Y[t o] = H * W2
out Y: f16
"""


@pytest.mark.parametrize("text, sizes, fixed", [
    (DYNAMIC, {**SMALL, "d": 16}, {"d": 16}),
    (CHAIN, {"t": 33, "i": 16, "f": 24, "o": 8}, {"i": 16, "o": 8}),
])
def test_the_tensor_cores_engine_specialises_a_head_it_needs_static(text, sizes, fixed, rng,
                                                                    within_budget):
    """--engine tensor-cores with the head dynamic and given: the plan is the specialised
    one, on the tensor cores at odd sizes against float64 (it was N0606 although the size was
    given). With the head dynamic, fusion makes no kernel the tensor cores cannot run
    (FlashAttention, the chain: compiler/kernel_plan.py), so the dynamic plan is the products
    apart, predicted slower. A size the fragments do not take whole is specialised too
    (padded: headpad.py)."""
    d = napkin.load(text)
    kernel = Kernel(d, Options.make(target="h100", engine="tensor-cores"), backend="emulate")
    inputs = {s.name: (rng.standard_normal(tuple(sizes[a] for a in s.axes)) * 0.5)
              .astype(np.float16) for s in d.inputs}
    outputs = kernel(**inputs)
    assert kernel.plan.specialised == fixed
    assert " dynamic; predicted" not in kernel.explain() and "dynamic)" in kernel.explain()
    rep = report(kernel.plan)
    assert rep["unspecialised_seconds"] > rep["predicted_seconds"], rep
    within_budget(d, inputs, dict(zip([s.name for s in d.outputs], outputs)), plan=kernel.plan)
    odd = {a: v + 8 for a, v in fixed.items()}               # (d, i = 24; o = 16)
    options = Options.make(target="h100", engine="tensor-cores", shape={**sizes, **odd})
    assert pipeline.plan(d, options).specialised == odd
    if text is DYNAMIC:     # a head wider than specialisation takes: the products apart
        p = plan(d, "h100", {**sizes, "d": specialise.MAX_SIZE + 8}, engine="tensor-cores")
        assert p.specialised == {} and ATTENTION not in [k.schedule.engine for k in p.kernels]
        assert all(k.schedule.engine in TENSOR_ENGINES for k in p.kernels
                   if any(isinstance(ir.op(p.graph, n), ir.Contract) for n in k.kernel.nodes))
