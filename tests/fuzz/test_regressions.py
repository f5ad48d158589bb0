"""Every case under tests/regressions/ (shrunk fuzz failures and hand-written ones for the
bugs the fuzzers found): interpreted, emulated and compared with the reference (a case whose
.json gives `thorough`, its reason, in the thorough tier only); a case saved as too slow (`time_limit` in its .json: benchmarks/fuzz.py's --case-seconds) within
that limit."""

from __future__ import annotations

import json

import pytest

from .harness import REGRESSIONS, check_case, load_regression
from .timeouts import CaseTimeout, limit, stage

CASES = sorted(REGRESSIONS.glob("*.napkin"))


def test_there_are_regressions():
    assert CASES


def _param(path):
    """A case, in the thorough tier where its .json says why (`thorough`: its CPU cost)."""
    why = json.loads(path.with_suffix(".json").read_text()).get("thorough")
    return pytest.param(path, id=path.stem, marks=[pytest.mark.thorough] if why else [])


@pytest.mark.parametrize("path", [_param(p) for p in CASES])
def test_regression(path):
    case, options = load_regression(path)
    seconds = json.loads(path.with_suffix(".json").read_text()).get("time_limit")
    try:
        with limit(seconds):
            check_case(case, **options)
    except CaseTimeout as exc:
        pytest.fail(f"{path.stem}: {exc} in {stage(exc)}")
