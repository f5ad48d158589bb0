"""Schedule hints, any of them (`hints.py`): each ends in a clean NapkinError pointing at a
hint or in a plan whose interpreted result matches the float64 reference (the emulator runs
a share of them too)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

from .harness import Checked
from .hints import check_hinted, hinted

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))


def _check(case, emulate: bool) -> None:
    try:
        check_hinted(case, emulate)
    except Checked as exc:
        raise AssertionError(f"{exc.failure}\n{case[1]}") from None


@settings(max_examples=max(1, int(60 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(hinted())
def test_hints_interpreted(case):
    _check(case, emulate=False)


@settings(max_examples=max(1, int(5 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(hinted())
def test_hints_emulated(case):
    _check(case, emulate=True)
