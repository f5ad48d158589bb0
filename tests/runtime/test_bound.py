"""The order-aware bound of the tolerance rule (runtime/bound.py): Higham's bound for
recursive summation, against the formula and against sums actually computed in f32 in the
worst order; and it still flags a wrong value."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan
from napkin.runtime import bound, compare

U = 2.0 ** -24
LONG = """
axis i = 128, l = 257
in X[l]: f32
S[] = sum[i l](where(i <= i, X, 0))
out S: f32
"""


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def test_a_sum_gets_gamma_n_minus_1_times_the_sum_of_magnitudes(rng):
    d = napkin.load("axis i = 1001\nin X[i]: f32\nS[] = sum[i](X)\nout S: f32\n")
    x = rng.uniform(-1, 1, 1001).astype(np.float32)
    got = float(bound.evaluate(d, {"X": x})["S"])
    want = gamma(1000) * float(np.sum(np.abs(x.astype(np.float64))))
    assert want <= got <= want * 1.001
    # a plan's shorter sequential accumulation caps the count: 40 additions at most
    capped = float(bound.evaluate(d, {"X": x}, longest=40)["S"])
    assert gamma(40) * np.sum(np.abs(x.astype(np.float64))) <= capped <= got / 20


def test_a_sequential_f32_sum_in_the_worst_order_passes_where_the_pairwise_budget_did_not():
    # 1 followed by many values just under half an ulp of the running sum: each addition
    # rounds them away in sequence, while NumPy's pairwise sum keeps them
    n = 20001
    d = napkin.load(f"axis i = {n}\nin X[i]: f32\nS[] = sum[i](X)\nout S: f32\n")
    x = np.full(n, np.float32(2.0 ** -24 * 0.99), dtype=np.float32)
    x[0] = 1.0
    sequential = np.cumsum(x, dtype=np.float32)[-1:].reshape(())     # cumsum: one add at a time
    ref, low, order = compare.references(d, {"X": x})
    assert not compare.check(sequential, ref["S"], low["S"], "f32", "S")     # the old rule
    assert compare.check(sequential, ref["S"], low["S"], "f32", "S", order["S"])


@pytest.mark.parametrize("off", [0.02, -0.01])
def test_a_long_sum_off_by_a_percent_or_two_is_still_flagged(rng, off):
    """The emulated kernel (32 lanes, each summing 1,152 terms in sequence) passes with the
    bound its plan gives; the same value off by 1 or 2 percent does not."""
    d = napkin.load(LONG)
    x = rng.uniform(0.0, 1.0, 257).astype(np.float32)      # a sum that does not cancel
    p = plan(d, "h100", {})
    assert bound.longest_accumulation(p) < 128 * 257 // 16
    out = run_plan(p, {"X": x}, p.sizes)["S"]
    verdict = compare.against_reference(d, {"X": x}, {"S": out}, plan=p)["S"]
    assert verdict, verdict.message
    wrong = np.float32(np.float64(out) * (1 + off))
    assert not compare.against_reference(d, {"X": x}, {"S": wrong}, plan=p)["S"]
    assert not compare.against_reference(d, {"X": x}, {"S": wrong})["S"]      # no plan either


def test_a_wrong_term_in_a_long_cancelling_sum_is_flagged_with_the_plan(rng):
    """Values of both signs: 8 extra copies of the largest term move the sum (about -1,227)
    by 8, 0.65 percent, which the plan's bound (1.17: Higham's worst case for 1,184
    additions) flags; the reduced axes' product (32,895 additions) gives 32.5, which would
    not: the fuzzers and the seeded-bug tests pass their plan."""
    d = napkin.load(LONG)
    x = rng.uniform(-1.0, 1.0, 257).astype(np.float32)
    p = plan(d, "h100", {})
    ref, low, order = compare.references(d, {"X": x}, p)
    wrong = np.float32(ref["S"] + 128 * float(np.max(np.abs(x))) / 16)   # 8 of 128 copies
    assert not compare.check(wrong, ref["S"], low["S"], "f32", "S", order["S"])


def test_softmax_allows_the_rounding_of_a_split_log_sum_exp_and_no_more():
    """fuzz-4d85373ac7c4: softmax[i](i) over 97 split in two merges log-sum-exps; the f32
    lse (96.4587) is 3.6e-6 from the real one, a relative error of every probability."""
    d = napkin.load("axis i = 97\nin X[]: f32\nP[i] = softmax[i](i + 0 * X)\nout P: f32\n")
    inputs = {"X": np.float32(0.5)}
    ref, low, order = compare.references(d, inputs)
    x, f = np.arange(97.0), np.float32
    lse = f(np.log(np.sum(np.exp(x - 96))) + 96)            # rounded once to f32
    split = np.exp((x.astype(f) - lse).astype(f)).astype(f)
    assert not compare.check(split, ref["P"], low["P"], "f32", "P")     # the old rule
    assert compare.check(split, ref["P"], low["P"], "f32", "P", order["P"])
    assert not compare.check(split * f(1.0001), ref["P"], low["P"], "f32", "P", order["P"])
