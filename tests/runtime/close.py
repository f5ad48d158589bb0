"""Shared by the tests of diagrams written for these tests (test_unseen_diagrams.py,
test_softmax_many_axes.py): an output against its float64 oracle, NaNs and infinities in
the same places, the finite values within `slack` roundings of a dtype at the oracle's scale."""

from __future__ import annotations

import numpy as np

EPS = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}


def assert_close(out, want, dtype="f32", slack=8.0, floor=2e-5):
    """|out - want| within `slack` roundings of `dtype` (plus `floor`), at the scale of `want`."""
    out = np.asarray(out, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert out.shape == want.shape
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(out[~finite], want[~finite])
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    err = float(np.max(np.abs(out[finite] - want[finite]), initial=0.0))
    assert err <= (slack * EPS[dtype] + floor) * scale, (err, scale)
