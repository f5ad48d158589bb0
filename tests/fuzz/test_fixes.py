"""Regression tests for bugs the fuzzers found that are not a diagram in tests/regressions/."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import napkin
from napkin.codegen.cexpr import float_literal
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import nvrtc

from .injection import cli
from .mutants import SUITE, run_check

BASE = "axis a\nin X[a]: f32\nY[a] = X * 2\nout Y: f32\n"


@pytest.mark.parametrize("digits", ["\uff16\uff14", "\u0663", "\u0969\u096a"])
def test_numbers_are_ascii_digits(digits):
    """`axis d = ６４` (fullwidth, Arabic-Indic, Devanagari digits) was read as 64."""
    with pytest.raises(NapkinError) as exc:
        napkin.load(f"axis d = {digits}\nin X[d]: f32\nY[d] = X\nout Y: f32\n")
    assert exc.value.code == "N0101"


@pytest.mark.parametrize("value", ["\u00b2", "\uff16"])
def test_cli_sizes_are_ascii_digits(value):
    """`--shape a=²` passed str.isdigit() and crashed int() (exit 101)."""
    status, _, err = cli(["compile", "matmul", "--shape", f"m={value}"])
    assert status == 2 and "N0804" in err


def test_paths_with_nul_or_lone_surrogates_are_clean_errors():
    for path in ("a\x00b.napkin", "a\ud800.napkin"):
        with pytest.raises(NapkinError) as exc:
            napkin.load(pathlib.Path(path))
        assert exc.value.code == "N0801"


def test_planning_an_empty_axis(tmp_path):
    """`--shape a=0` divided by zero in the cost model (exit 101); negative sizes are errors."""
    d = napkin.load(BASE)
    assert plan(d, "h100", {"a": 0}).sizes["a"] == 1
    with pytest.raises(NapkinError):
        plan(d, "h100", {"a": -3})
    path = tmp_path / "base.napkin"
    path.write_text(BASE)
    status, out, err = cli(["compile", str(path), "--shape", "a=0"])
    assert status == 0 and "napkin_k0" in out, err


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_empty_axes_run_on_every_backend(backend):
    d = napkin.load("axis a, b\nin X[a b]: f32\nY[a] = max[b](X)\nZ[a] = mean[b](X)\n"
                    "L[a] = logsumexp[b](X)\nS[a] = sum[b](X)\nout Y: f32, Z: f32, L: f32, S: f32")
    Y, Z, L, S = napkin.run(d, np.ones((3, 0), np.float32), backend=backend)
    assert (Y == -np.inf).all() and np.isnan(Z).all() and (L == -np.inf).all() and (S == 0).all()
    (O,) = napkin.run("attention", *(np.ones(s, np.float16) for s in
                                     ((1, 2, 3, 64), (1, 2, 0, 64), (1, 2, 0, 64))), backend=backend)
    assert O.shape == (1, 2, 3, 64) and (O == 0).all()


def test_constants_beyond_f32_compile():
    """`X * 3.5e38` printed `3.5e+38f`, which NVRTC rejects ("floating constant is out of
    range"); constants are now rounded to f32 first."""
    assert float_literal(3.5e38) == "NAPKIN_INF" and float_literal(-1e39) == "(-NAPKIN_INF)"
    assert float_literal(1e-46) == "0.0f" and float_literal(0.1) == "0.1f"
    d = napkin.load(BASE.replace("X * 2", "X * 3.5e38 + 1e-46"))
    source = render(lower(plan(d, "h100", {"a": 37})))
    if nvrtc.available():
        assert nvrtc.compile(source, arch="sm_90", want_cubin=False).kernels == ("napkin_k0",)


def test_one_lane_stores_a_value_the_lanes_share():
    """Every lane of a split wrote the same element (a data race ThreadSanitizer reports)."""
    check = next(c for c in SUITE if c.sanitize == "thread")
    assert run_check(check) == ""


def test_an_axis_a_softmax_normalises_cannot_be_contracted_inside_it():
    """`E[] = softmax[j](X * X)` placed the contraction of j inside the softmax over j: an
    IRInvariantError (an internal error) instead of N0301. Found by the random diagrams."""
    for text in ("axis j\nin X[j]: f32\nE[] = softmax[j](abs(X * X))\nout E: f32",
                 "axis j, k\nin X[j k]: f32\nE[k] = softmax[j](X * X)\nout E: f32"):
        with pytest.raises(NapkinError) as exc:
            napkin.load(text)
        assert exc.value.code == "N0301"
