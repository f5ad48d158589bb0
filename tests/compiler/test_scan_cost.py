"""The cost model prices a scan's prefix loop: each position folds every position before it
(docs/language.md: work quadratic in the length of the axis), not one fold a point."""

from __future__ import annotations

import pytest

import napkin
from napkin.compiler.flops import work_flops
from napkin.compiler.plan import plan

SCAN = "axis r, c\nin X[r c]: f32\nY[r c] = {fn}[c](X)\nout Y: f32\n"


def _time(d, c: int) -> float:
    return sum(k.cost.time for k in plan(d, "h100", {"r": 512, "c": c}).kernels)


@pytest.mark.parametrize("fn", ["cumsum", "cumprod"])
def test_a_scan_is_priced_quadratic_in_its_length(fn):
    d = napkin.load(SCAN.format(fn=fn))
    # four times the length: sixteen times the folds (a fold a point priced it 4x, and a
    # cumsum over 4096 positions HBM-bound at 65 us where its loop folds 8.4 million a row)
    assert _time(d, 4096) > 10 * _time(d, 1024)
    (k,) = plan(d, "h100", {"r": 512, "c": 1023}).kernels
    sizes = {"r": 512, "c": 1023}
    flops = sum(work_flops(k.model, {a: sizes[a] for a in sizes}, k.choice, sizes).values())
    assert flops == pytest.approx(512 * 1023 * 1024 / 2)     # (c + 1) / 2 folds a position
