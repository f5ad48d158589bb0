"""Mutation score: ten seeded code generation bugs, switched on one at a time, against the
differential suite of `mutants.py` (emulated library diagrams, sanitizers where relevant).
At least nine must be caught; the report names the check that caught each."""

from __future__ import annotations

import pytest

from .mutants import MUTANTS, SUITE, run_check, score


@pytest.mark.parametrize("check", SUITE, ids=[c.name for c in SUITE])
def test_the_unmutated_suite_passes(check):
    assert run_check(check) == ""


def test_mutation_score():
    caught, lines = 0, []
    for m in MUTANTS:
        why, changed = score(m)
        assert changed, f"mutant {m.name!r} changes no generated source"
        caught += why != "not caught"
        lines.append(f"{m.name}: {why}")
    print("\n".join(lines))
    assert len(MUTANTS) == 10
    assert caught >= 9, "\n".join(lines)
