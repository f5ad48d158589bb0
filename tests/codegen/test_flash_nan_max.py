"""A row of scores holding +inf and a NaN: its max, logsumexp and sum of exponentials are NaN
(the language's NaN rule: NaN propagates through max and every arithmetic operation). The
tensor cores' online softmax took the running maximum by fmaxf, which skips a NaN, so such a
row's maximum was +inf and its statistics +inf (the sum of exponentials, NaN from inf - inf in
every exponent, cannot tell that row from one without a NaN); found by a sweep of unseen
inputs (attention that also outputs its logsumexp and row max, inputs with infinities)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.runtime import reference

TEXT = """axis q, x, d
in Q[q d]: f16
in K[x d]: f16
S[q x] = Q * K
M[q] = max[x](S)
L[q] = logsumexp[x](S)
out M: f32, L: f32
"""


def _inputs():
    rng = np.random.default_rng(1)
    Q, K = rng.uniform(-1, 1, (3, 16)), rng.uniform(-1, 1, (33, 16))
    Q[0, 3] = np.inf        # row 0: every score +inf or -inf ...
    K[5, 2] = np.nan        # ... and key 5's NaN (rows 1 and 2: a NaN among finite scores)
    Q[2, 7] = -np.inf
    return {"Q": Q.astype(np.float16), "K": K.astype(np.float16)}


def test_the_running_maximum_keeps_a_nan():
    d = napkin.load(TEXT)
    source = napkin.compile(d, target="h100", backend="reference").compiled_for(
        {"q": 3, "x": 33, "d": 16})[2]
    assert "napkin_max_nan(mx, sc[" in source and "fmaxf(mx" not in source   # (on mma.sync)


@pytest.mark.thorough
def test_statistics_of_a_row_with_inf_and_nan_on_the_emulator():
    d = napkin.load(TEXT)
    ins = _inputs()
    ref = reference.evaluate(d, ins)
    got = napkin.compile(d, target="h100", backend="emulate")(**ins)
    assert all(np.isnan(ref[n]).all() for n in ("M", "L"))
    for name, out in zip(("M", "L"), got):
        np.testing.assert_array_equal(np.isnan(np.asarray(out)), np.isnan(ref[name]), name)
