"""The argmax/argmin accumulators: any split into strided parts and chunks, merged in any order,
finishes as NumPy's argmax/argmin (ties to the first position, the first NaN wins, -1 if empty)."""

from __future__ import annotations

import numpy as np
import pytest

from napkin.compiler import accumulators as acc


@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("ways, chunk", [(1, 13), (3, 4), (4, 1), (2, 5)])
def test_arg_accumulators_split_and_merged(fn, ways, chunk, rng):
    a = acc.for_reduce(fn)
    numpy = np.argmax if fn == "argmax" else np.argmin
    for trial in range(40):
        x = rng.integers(-3, 3, (4, 13)).astype(np.float64)
        if trial % 3 == 0:
            x[rng.random(x.shape) < 0.1] = np.nan
        if trial % 4 == 0:
            x[rng.random(x.shape) < 0.3] = -np.inf if fn == "argmax" else np.inf
        states = []
        for part in range(ways):
            st = a.init((4,), np.float64)
            for start in range(0, 13, chunk):
                pos = np.arange(start, min(start + chunk, 13))[part::ways]
                st = a.update(st, x[:, pos], (1,), pos)
            states.append(st)
        order = rng.permutation(ways)
        st = states[order[0]]
        for i in order[1:]:
            st = a.merge(st, states[i])
        np.testing.assert_array_equal(a.finalize(st), numpy(x, axis=1))


def test_an_empty_arg_state_finishes_as_minus_one():
    st = acc.ARGMAX.init((3,), np.float64)
    np.testing.assert_array_equal(acc.ARGMAX.finalize(st), [-1, -1, -1])


@pytest.mark.parametrize("fn", ["cumsum", "cumprod"])
def test_scan_accumulators_carry_a_prefix_across_chunks_and_lanes(fn, rng):
    """Chunk by chunk with a carried total, and lanes (contiguous parts) whose totals merge:
    the prefixes are NumPy's cumsum/cumprod."""
    scan = acc.SCAN[fn]
    x = rng.uniform(0.5, 1.5, (3, 17))
    want = np.cumsum(x, 1) if fn == "cumsum" else np.cumprod(x, 1)
    total, parts = np.full(3, scan.identity), []
    for start in range(0, 17, 5):
        prefix, total = scan.step(total, x[:, start:start + 5], 1)
        parts.append(prefix)
    np.testing.assert_allclose(np.concatenate(parts, 1), want, rtol=1e-12)
    np.testing.assert_allclose(total, want[:, -1], rtol=1e-12)
    # two lanes: each scans its half from the identity; the second is finished with the first's total
    left, t_left = scan.step(np.full(3, scan.identity), x[:, :8], 1)
    right, t_right = scan.step(np.full(3, scan.identity), x[:, 8:], 1)
    fixed, _ = scan.step(t_left, x[:, 8:], 1)
    np.testing.assert_allclose(fixed, want[:, 8:], rtol=1e-12)
    np.testing.assert_allclose(scan.merge(t_left, t_right), want[:, -1], rtol=1e-12)
