"""Regressions from fuzzing the version-1.1 forward features (integers, gathers, new
functions, scans, splits, storage dtypes), each held to an independent float64 NumPy oracle
(not napkin's reference executor) or to its exact diagnostic."""

from __future__ import annotations

import numpy as np

import napkin
from napkin.runtime import bound, compare

FLOORDIV = """
axis a, b
in F[a b]: f32
Y[a b] = F // 2.0 + F // -0.75
out Y: f32
"""


def test_check_of_a_float_floor_division_bounds_it_instead_of_crashing(rng):
    # `--check` crashed (ValueError in numpy.transpose): the bound of an exact function was
    # a 0-d array labelled with the value's axes, and float `//` is the one exact function
    # whose result is a float, so its bound reached the output
    d = napkin.load(FLOORDIV)
    f = (rng.standard_normal((3, 5)) * 4).astype(np.float32)
    f[0, :3] = [-7.0, 7.5, 0.0]
    want = f.astype(np.float64) // 2.0 + f.astype(np.float64) // -0.75
    assert bound.evaluate(d, {"F": f})["Y"].shape == (3, 5)
    (got,) = napkin.run(d, F=f, backend="interpret")
    np.testing.assert_array_equal(got, want.astype(np.float32))
    verdict = compare.against_reference(d, {"F": f}, {"Y": got})["Y"]
    assert verdict.ok, verdict


INLINE_ARGMAX = """
axis t, v, m
in E[v m]: f32
in Z[t v]: f32
X[t m] = E[argmax[v](Z) m] + E[(argmin[v](Z)) m]
out X: f32
"""


def test_a_reduction_written_as_a_gather_position_is_one_position(rng):
    # `E[argmax[v](Z) m]` was read as `argmax[v]`, then `(Z)`, then `m`: N0302 "3 are named",
    # because a bracketed call in a position was taken for an indexed array
    e = rng.standard_normal((9, 6)).astype(np.float32)
    z = rng.standard_normal((5, 9)).astype(np.float32)
    want = e.astype(np.float64)[z.argmax(1)] + e.astype(np.float64)[z.argmin(1)]
    for backend in ("reference", "interpret"):
        (got,) = napkin.run(INLINE_ARGMAX, E=e, Z=z, backend=backend)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
