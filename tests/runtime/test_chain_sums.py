"""Stored sums of a chain's chunk values (compiler/chain_sums.py): the gradient of an
attention bias, dB[h q x] = sum[b](dS), and of a learned ALiBi slope, dslope[h] =
sum[q x](sum[b](-dS) * (q - x)), come out of the kernel computing dK and dV (the chain
streaming the queries), added across blocks with atomics: no S stored, no second
recomputation of dS. Planned at scale (one chain computes the sum), emulated at odd small
sizes against the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.model import array_name
from napkin.compiler.plan import plan
from napkin.codegen.chain_sums import kind
from napkin.compiler.schedule import CHAIN
from napkin.pipeline import run_plan
from napkin.runtime.interpret import interpret
from napkin.runtime.dtypes import numpy_dtype

from .close import assert_close

BIAS = """axis b, h, q, x
axis d = {d}
in Q[b h q d]: {t}
in K[b h x d]: {t}
in V[b h x d]: {t}
in B[{bias}]: {t}
S[b h q x] = Q * K / sqrt(size(d)) + B
O[b h q d] = softmax[x](S) * V
out O: {t}
"""
SLOPE = """axis b, h, q, x
axis d = {d}
in Q[b h q d]: {t}
in K[b h x d]: {t}
in V[b h x d]: {t}
in slope[h]: f32
S[b h q x] = Q * K / sqrt(size(d)) - slope * (q - x)
P[b h q x] = softmax[x](where(x <= q, S, -inf))
O[b h q d] = P * V
out O: {t}
"""
BIG = dict(b=2, h=16, q=2048, x=2048)
SMALL = dict(b=2, h=3, q=37, x=45)
# (a key bias's dB[h x] = sum[b q](dS): added per row of the dK/dV chain after its chunks; a
# query bias's sum[b x](dS) is 0 up to rounding, sum[x](P * (dP - D)), and tests nothing)
CASES = {"dB": (BIAS, 64, "h q x"), "dslope": (SLOPE, 32, ""), "key dB": (BIAS, 64, "h x")}


def _planned(name: str, dtype: str, across: bool = True):
    text, d, bias = CASES[name]
    diagram = napkin.grad(napkin.load(text.format(d=d, t=dtype, bias=bias)))
    return diagram, plan(diagram, "h100", BIG, across=across)


def _summing(p, name: str):
    """The kernels computing `name` (not recomputing it): their engines, sums and kinds."""
    return [(kp.schedule.engine, [(array_name(p.graph, m.store), kind(kp.schedule.site, m))
                                  for m in kp.schedule.sums])
            for kp in p.kernels
            if any(array_name(p.graph, n) == name.split()[-1] for n in kp.kernel.stores)]


@pytest.mark.parametrize("name, how", [("dB", "each"), ("dslope", "all"), ("key dB", "rows")])
def test_one_chain_computes_the_sum(name, how):
    _, p = _planned(name, "f16")
    assert _summing(p, name) == [(CHAIN, [(name.split()[-1], how)])]


@pytest.mark.thorough       # (the plans without atomics: up to 25 CPU-s)
@pytest.mark.parametrize("name", ["dB", "dslope", "key dB"])
def test_the_chain_computing_the_sum_is_faster(name):
    _, p = _planned(name, "f16")
    _, apart = _planned(name, "f16", across=False)      # (the sum in kernels of its own)
    assert _summing(apart, name)[0][0] != CHAIN
    # model, h100 (b=2 h=16 q=x=2048; against the plan without atomics): dB 0.96 -> 0.67
    # ms (1.30 before the plan without atomics took a dual kernel, duals.py), dslope 1.55 ->
    # 0.28 ms, key dB 1.15 -> 0.35 ms
    assert p.time < 0.75 * apart.time


@pytest.mark.parametrize("name, dtype", [
    ("dB", "f16"), pytest.param("dB", "bf16", marks=pytest.mark.thorough), ("dslope", "f16"),
    pytest.param("dslope", "bf16", marks=pytest.mark.thorough),
    pytest.param("key dB", "f16", marks=pytest.mark.thorough)])
def test_the_sums_match_float64_at_odd_sizes(rng, name, dtype):
    diagram, p = _planned(name, dtype)
    d = CASES[name][1]
    sizes = dict(SMALL, d=d)
    inputs = {s.name: (rng.standard_normal(tuple(sizes[a] for a in s.axes))
                       * (0.1 if s.name == "slope" else 1.0)).astype(numpy_dtype(s.dtype))
              for s in diagram.inputs}
    out = run_plan(p, inputs, SMALL)
    want = dict(zip([s.name for s in diagram.outputs],
                    napkin.run(diagram, *inputs.values(), backend="reference")))
    for out_name in [s.name for s in diagram.outputs]:
        assert_close(out[out_name], want[out_name], dtype, slack=4.0)
    if dtype == "f16":      # the schedule interpreter, the same plan (NumPy, block by block)
        name = name.split()[-1]
        assert_close(interpret(p, inputs)[name], want[name], dtype, slack=4.0)
