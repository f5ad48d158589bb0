"""Every case under tests/regressions/ (shrunk fuzz failures and hand-written ones for the
bugs the fuzzers found): interpreted, emulated and compared with the reference."""

from __future__ import annotations

import pytest

from .harness import REGRESSIONS, check_case, load_regression

CASES = sorted(REGRESSIONS.glob("*.napkin"))


def test_there_are_regressions():
    assert CASES


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_regression(path):
    case, options = load_regression(path)
    check_case(case, **options)
