"""An f16 output whose finite values pass 65504 stores inf (as a GPU's conversion does): the
host backends say so once per call in napkin's words, naming the output and the count, and
NumPy's "overflow encountered in cast" no longer reaches the caller (api/kernel.py `_stored`)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import napkin

TEXT = """axis i
in X[i]: f32
Y[i] = X * 1000
Z[i] = X
out Y: f16
out Z: f16
"""


@pytest.mark.parametrize("backend", ["reference", "interpret"])
def test_an_overflowing_f16_output_is_named_with_its_count(backend, caplog):
    rng = np.random.default_rng(5)
    X = rng.uniform(-120, 120, 37).astype(np.float32)
    X[3], X[4] = np.inf, np.nan                        # already infinite: not counted
    big = np.isfinite(X) & (np.abs(X.astype(np.float64) * 1000) >= 65520)  # rounds past 65504
    assert 5 < big.sum() < 30
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="napkin"):
        warnings.simplefilter("error")                 # no NumPy RuntimeWarning
        Y, Z = napkin.run(napkin.load(TEXT), backend=backend, X=X)
    with np.errstate(over="ignore"):                   # IEEE: past the largest, inf
        want = (X.astype(np.float64) * 1000).astype(np.float16)
    np.testing.assert_array_equal(Y, want)
    np.testing.assert_array_equal(np.isinf(Y), big | np.isinf(X))
    np.testing.assert_array_equal(Z, X.astype(np.float16))
    records = [r.getMessage() for r in caplog.records if r.name == "napkin"]
    assert len(records) == 1
    assert f"output `Y` (f16): {big.sum():,} of 37 values overflowed to inf" in records[0]
    assert "`Z`" not in records[0] and "declare it f32 or bf16" in records[0]


def test_no_overflow_says_nothing(caplog):
    X = np.linspace(-65, 65, 11).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="napkin"):
        Y, _ = napkin.run(napkin.load(TEXT), backend="interpret", X=X)
    assert np.isfinite(Y).all() and not caplog.records


def test_the_lowp_model_and_run_s_summary_overflow_quietly():
    # the f16 model of `napkin run --check` rounds every op to f16 (dtypes.round_to), and
    # `napkin run` prints an output's sum: inf there is meaning, not a NumPy warning
    from napkin.commands.run import describe
    from napkin.runtime import dtypes
    x = np.array([1e5, -1e5, 3.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dtypes.round_to(x, "f16").tolist() == [np.inf, -np.inf, 3.0]
        assert dtypes.stored(x, "f16")[1] == 2
        assert "sum=nan" in describe("Y", dtypes.stored(x, "f16")[0])


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_run_check_holds_an_overflowed_output_to_the_stored_reference(backend, capsys):
    """`napkin run --check` compares an output with the float64 reference as stored: where the
    reference passes f16's largest, inf is the meaning (it said "-inf in different places ...
    this is a bug in napkin" of every backend, the reference's own included, and NumPy's cast
    warning reached the user)."""
    from napkin.cli import main
    text = "axis t, m\nin X[t m]: f16\nY[t] = sum[m](X) * 30000.0\nout Y: f16\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status = main(["run", text, "--shape", "t=5,m=7", "--backend", backend, "--check"])
    out = capsys.readouterr().out
    assert status == 0 and "sum=-inf" in out and "matches the float64 reference" in out, out


def test_the_verdict_on_infinities_at_the_edge_of_the_range():
    from napkin.runtime.compare import check
    ref = np.array([65600.0, -65600.0, 1000.0, 65000.0, 3.0])    # 65600 stores inf in f16
    naive = ref.copy()
    good = np.array([np.inf, -np.inf, 1000.0, 65000.0, 3.0])
    assert check(good, ref, naive, "f16").ok
    assert check(np.array([65504.0, -65504.0, 1000.0, 65000.0, 3.0]), ref, naive, "f16").ok
    for wrong in ([-np.inf, -np.inf, 1000.0, 65000.0, 3.0],     # the wrong sign
                  [np.nan, -np.inf, 1000.0, 65000.0, 3.0],      # NaN for an overflow
                  [np.inf, -np.inf, np.inf, 65000.0, 3.0],      # inf far from the largest
                  [np.inf, -np.inf, 1000.0, 65000.0, np.inf]):
        assert not check(np.array(wrong), ref, naive, "f16").ok, wrong
