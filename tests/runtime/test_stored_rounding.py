"""The tolerance rule counts the one rounding the language lets a kernel add: an array that
another statement reads and global memory holds in 16 bits (its output's or declared dtype)
is rounded where it crosses between kernels (docs/language.md). Its exact effect on each
element joins the order bound (compare.stored_rounding); the naive low-precision evaluation
alone can miss it where its own roundings cancel (fuzz seed 909)."""

from __future__ import annotations

import numpy as np

import napkin
from napkin.runtime import bound, compare

SQUARED = """
axis i = 31
in X[i]: f32
in Y[]: f16
E1[] = mean[i](X) - Y
E5[] = E1 * E1
out E5: f32, E1: f16
"""


def _inputs(seed):
    r = np.random.default_rng(seed)
    return {"X": r.uniform(-1, 1, 31).astype(np.float32),
            "Y": np.asarray(r.uniform(-1, 1), dtype=np.float16)}


def _kernels(inputs):
    """What two kernels compute: E1 in f32, stored in f16; E5 from the stored E1, in f32."""
    e1 = np.float32(np.mean(inputs["X"], dtype=np.float32) - np.float32(inputs["Y"]))
    stored = np.float16(e1)
    return np.float32(stored) * np.float32(stored), stored


def test_the_rounding_of_a_stored_array_reaches_its_readers_exactly_and_not_its_own_output():
    d = napkin.load(SQUARED)
    inputs = _inputs(1)
    ref = compare.references(d, inputs)[0]
    extra = compare.stored_rounding(d, inputs, ref)
    e1 = float(np.mean(inputs["X"].astype(np.float64)) - float(inputs["Y"]))
    want = abs(float(np.float16(e1)) ** 2 - e1 * e1)
    assert want > 0 and np.isclose(float(extra["E5"]), want, rtol=1e-12)
    assert float(extra["E1"]) == 0.0      # its own store is the floor's rounding already


def test_a_reader_of_the_stored_value_passes_where_the_naive_rule_alone_fails_it():
    d = napkin.load(SQUARED)
    missed = 0
    for seed in range(200):
        inputs = _inputs(seed)
        ref, low, order = compare.references(d, inputs)
        e5, e1 = _kernels(inputs)
        now = compare.check(e5, ref["E5"], low["E5"], "f32", "E5", order["E5"])
        assert now
        assert compare.check(e1, ref["E1"], low["E1"], "f16", "E1", order["E1"])
        before = compare.check(e5, ref["E5"], low["E5"], "f32", "E5", bound.evaluate(d, inputs)["E5"])
        missed += not before
        # the budget grows by that rounding's effect, no more
        term = float(compare.stored_rounding(d, inputs, ref)["E5"])
        assert np.isclose(now.budget - before.budget, term, rtol=1e-9, atol=1e-15)
    assert missed        # the cancelling case exists (the reason for the term)


def test_no_extra_evaluation_without_a_16_bit_array_read_by_another_statement():
    d = napkin.load("axis i = 5\nin X[i]: f16\nE1[] = sum[i](X)\nout E1: f16\n")
    inputs = {"X": np.arange(5, dtype=np.float16)}
    assert compare.stored_rounding(d, inputs, compare.references(d, inputs)[0]) == {}
