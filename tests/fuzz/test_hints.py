"""Schedule hints, any of them (`hints.py`): each ends in a clean NapkinError pointing at a
hint or in a plan whose interpreted result matches the float64 reference (the emulator runs
a share of them too)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from .budget import examples
from .harness import Checked
from .hints import check_hinted, hinted

def _check(case, emulate: bool) -> None:
    try:
        check_hinted(case, emulate)
    except Checked as exc:
        raise AssertionError(f"{exc.failure}\n{case[1]}") from None


@settings(max_examples=examples(60, 30), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(hinted())
def test_hints_interpreted(case):
    _check(case, emulate=False)


@settings(max_examples=examples(5, 5), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(hinted())
def test_hints_emulated(case):
    _check(case, emulate=True)
