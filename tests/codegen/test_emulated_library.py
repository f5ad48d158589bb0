"""Every library diagram in f32 and in f16 or bf16, emitted as CUDA and run by the CPU emulator.

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
from napkin.pipeline import run_plan

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


# Every diagram in f32 and in one 16-bit dtype, f16 and bf16 in turn: at these sizes the
# planner puts every library kernel on CUDA cores, where f16 and bf16 kernels are the same
# program but for the storage type and its conversions (which six diagrams of each dtype
# run); the tensor-core kernels of both are test_tensor_cores.py's.
# (the diagrams of language 1.1 are emulated once each, in f32 against their NumPy formulas, by
# tests/runtime/test_library_11.py)
VERSION_1 = [n for n in library_names() if n not in (
    "alibi_attention", "cross_entropy", "embedding", "gelu_erf", "paged_attention", "rope",
    "sliding_window_attention", "softcap_attention", "varlen_attention")]
# (the default run emulates each diagram once, in f32 for one in three, else its 16-bit
# dtype; the thorough tier both of each: the programs differ only in their storage type, and
# each emulation's g++ build is a second or two)
_DEFAULT = {(name, "f32" if i % 3 == 0 else ("f16", "bf16")[i % 2])
            for i, name in enumerate(VERSION_1)}
CASES = [c if c in _DEFAULT else pytest.param(*c, marks=pytest.mark.thorough)
         for c in [(name, "f32") for name in VERSION_1] +
         [(name, ("f16", "bf16")[i % 2]) for i, name in enumerate(VERSION_1)]]


@pytest.mark.parametrize("name, dtype", CASES)
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


@pytest.mark.parametrize("target", ["a100", "h200", "hopper-toy"])
@pytest.mark.parametrize("name", ["attention", "layernorm", "mlp"])
def test_other_targets_plans_emulated(name, target):
    d = library(name, "bf16")
    check(d, shape_of(d, b=1), target=target)


def test_fully_masked_rows_give_zero_in_the_emitted_kernel():
    import numpy as np

    import napkin
    text = ("axis b, h, q, x\naxis d = 16\nin Q[b h q d]: f16, K[b h x d]: f16, V[b h x d]: f16\n"
            "S[b h q x] = where(q >= 5 and x <= q, Q * K, -inf)\n"
            "P[b h q x] = softmax[x](S)\nO[b h q d] = P * V\nout O: f16")
    d = napkin.load(text)
    shape = {"b": 1, "h": 2, "q": 37, "x": 50}
    p = check(d, shape)
    inputs = random_inputs(d, shape, 5)
    out = run_plan(p, inputs, p.sizes)["O"]
    assert np.all(out[:, :, :5] == 0) and not np.isnan(out.astype(np.float32)).any()


def test_unfused_plans_emulated():
    d = library("attention", "f32")
    p = check(d, shape_of(d, b=1, h=2), fusion=False)
    assert len(p.kernels) == 3     # S and P go through global memory (f32)
