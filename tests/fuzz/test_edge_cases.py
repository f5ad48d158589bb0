"""Numeric edge cases of softmax and attention in f32, f16 and bf16 (see edges.py)."""

from __future__ import annotations

import pytest

from napkin.compiler.cost import Choice

from .edges import (ATTENTION, CAUSAL, FLASH, SOFTMAX, attention_expectations, attention_inputs,
                    causal_inputs, diagram, run_all, softmax_expectations, softmax_inputs)

DTYPES = ["f32", "f16", "bf16"]
# The degenerate shapes (rows of one element, one key) in f32 only: their kernels are the
# same in every dtype but for the storage type, which the main shape runs in all three
# (benchmarks/fuzz.py runs every shape in every dtype).


@pytest.mark.parametrize("cols, dtype", [(37, t) for t in DTYPES] + [(1, "f32")])
def test_softmax_edge_rows(dtype, cols):
    d = diagram(SOFTMAX, dtype)
    inputs = softmax_inputs(cols, dtype)
    shape = {"r": inputs["X"].shape[0], "c": cols}
    streamed = Choice((("r", 3),), ("c", 8), (("r", 1),), ("c", 4)) if cols > 1 else None
    for name, out in run_all(d, inputs, shape, streamed).items():
        try:
            softmax_expectations(out, cols)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc


@pytest.mark.parametrize("nq, nx, dtype", [(6, 23, t) for t in DTYPES] + [(4, 1, "f32")])
def test_attention_edge_rows(dtype, nq, nx):
    d = diagram(ATTENTION, dtype)
    inputs = attention_inputs(nq, nx, dtype)
    shape = {"b": 1, "q": nq, "x": nx}
    streamed = Choice((("b", 1), ("q", 2)), ("x", 4), (("q", 1),), ("x", 2)) if nx > 1 else None
    for name, out in run_all(d, inputs, shape, streamed).items():
        try:
            attention_expectations(out, inputs, nq, nx)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc


@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_rows_that_see_no_key_are_zero(dtype):
    d = diagram(CAUSAL, dtype)
    inputs = causal_inputs(19, 30, dtype)
    shape = {"b": 1, "q": 19, "x": 30}
    streamed = Choice((("b", 1), ("q", 4)), ("x", 8), (("q", 1),), None)
    for name, out in run_all(d, inputs, shape, streamed).items():
        assert (out["O"][0, :6] == 0).all(), name


@pytest.mark.parametrize("nq, nx, dtype", [(6, 23, "f16"), (6, 23, "bf16"), (4, 1, "f16"),
                                           (19, 150, "f16"), (19, 150, "bf16")])
def test_attention_edge_rows_on_tensor_cores(dtype, nq, nx):
    """FlashAttention-2's fragments keep the language's semantics: masked rows 0, NaN keys
    under the mask never leak, +-1e4 logits finite, a +inf query NaN."""
    d = diagram(FLASH, dtype)
    inputs = attention_inputs(nq, nx, dtype, head=16)
    shape = {"b": 1, "q": nq, "x": nx}
    for name, out in run_all(d, inputs, shape, tensor_cores=True).items():
        try:
            attention_expectations(out, inputs, nq, nx)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_causal_rows_that_see_no_key_are_zero_on_tensor_cores(dtype):
    d = diagram(CAUSAL.replace("axis d = 8", "axis d = 16"), dtype)
    inputs = causal_inputs(19, 130, dtype, head=16)
    shape = {"b": 1, "q": 19, "x": 130}
    for name, out in run_all(d, inputs, shape, tensor_cores=True).items():
        assert (out["O"][0, :6] == 0).all(), name
