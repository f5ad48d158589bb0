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
    names = {c.name for c in SUITE}
    for m in MUTANTS:
        assert m.caught_by in names, m
        # the check that caught it last time first: a mutant the suite catches is caught
        # whatever the order, and the builds of the checks it passes are saved
        why, changed = score(m, try_first=m.caught_by)
        assert changed, f"mutant {m.name!r} changes no generated source"
        caught += why != "not caught"
        lines.append(f"{m.name}: {why}")
    print("\n".join(lines))
    assert len(MUTANTS) == 10
    assert caught >= 9, "\n".join(lines)
