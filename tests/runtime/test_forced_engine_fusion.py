"""`--engine tensor-cores` on a gradient at small sizes (plan.tile, kernel_plan.py): where a
kernel fused as auto prices it is refused, fusion runs again making no kernel of several
statements the engine cannot run (it fused the whole backward into one CUDA-core kernel and
then failed it: N0606, "fuses 8 contraction(s)"); where one statement's product reads f32 intermediates the 16-bit
storage decision left f32 (a saved gradient: the f32 logsumexp keeps Q and K f32), N0606's
help names the declarations that put it on the tensor cores (stored16.declare)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.compiler.schedule import TENSOR_ENGINES
from napkin.diagrams.diagnostics import NapkinError
from napkin.pipeline import run_plan

from .close import assert_close
from .test_projection_cotangents import PROJECTED

SMALL = dict(b=1, t=37, s=37, m=40, h=3)


def _contracting(p) -> list:
    from napkin.compiler import ir
    return [k for k in p.kernels if any(isinstance(ir.op(p.graph, n), ir.Contract)
                                        for n in k.kernel.nodes)]


@pytest.mark.thorough       # (planning the projected gradient, forced: 15 CPU-s; the test
def test_a_forced_engine_fuses_only_what_it_can_run():     # below also runs this plan)
    p = plan(napkin.grad(napkin.load(PROJECTED)), "h100", SMALL, engine="tensor-cores")
    kernels = _contracting(p)
    assert len(kernels) > 8 and {k.schedule.engine for k in kernels} <= set(TENSOR_ENGINES), \
        [k.schedule.engine for k in p.kernels]


@pytest.mark.thorough       # (planning the saved gradient, forced, to its refusal: 13 CPU-s)
def test_n0606_names_the_declarations_that_put_a_product_on_tensor_cores():
    text = napkin.grad(napkin.load(PROJECTED), saved=True).source.text
    with pytest.raises(NapkinError) as exc:
        plan(napkin.load(text), "h100", SMALL, engine="tensor-cores")
    d = exc.value.diagnostics[0]
    assert d.code == "N0606" and "declare `Q`, `K` 16-bit (`Q[b h t d]: f16 = ...`" in d.help, d


@pytest.mark.thorough       # (emulating the gradient's 19 kernels; following the help)
def test_the_forced_gradient_matches_float64_and_the_help_is_followed(rng):
    d = napkin.grad(napkin.load(PROJECTED))
    p = plan(d, "h100", SMALL, engine="tensor-cores")
    b, t, m, h = 1, 37, 40, 3
    inputs = dict(X=rng.standard_normal((b, t, m)).astype(np.float16),
                  **{w: (rng.standard_normal((m, h, 16)) * m ** -0.5).astype(np.float16)
                     for w in ("Wq", "Wk", "Wv")},
                  Wo=(rng.standard_normal((h, 16, m)) * (16 * h) ** -0.5).astype(np.float16),
                  dR=rng.standard_normal((b, t, m)).astype(np.float16))
    out = run_plan(p, inputs, SMALL)
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    for name in want:
        assert_close(out[name], want[name], "f16", slack=8.0)
    text = napkin.grad(napkin.load(PROJECTED), saved=True).source.text
    for n, axes in (("Q", "b h t d"), ("K", "b h s d"), ("V", "b h s d")):
        text = text.replace(f"\n{n}[{axes}] =", f"\n{n}[{axes}]: f16 =")
    p = plan(napkin.load(text), "h100", SMALL, engine="tensor-cores")
    assert {k.schedule.engine for k in _contracting(p)} <= set(TENSOR_ENGINES)
