"""Parametrised families the default run samples: every `every`-th case runs by default (the
first always), the others with the thorough tier (`NAPKIN_FUZZ_SCALE=2 ... -m thorough` or a
full run at that scale), so the default run keeps each family's coverage within its CPU
budget and the thorough tier keeps every case."""

from __future__ import annotations

import pytest


def sampled(cases, every: int = 2) -> list:
    """`cases` with all but every `every`-th marked thorough (ones already given as
    pytest.param are kept as they are)."""
    out = []
    for i, case in enumerate(cases):
        if i % every == 0 or hasattr(case, "marks"):
            out.append(case)
        else:
            values = case if isinstance(case, tuple) else (case,)
            out.append(pytest.param(*values, marks=pytest.mark.thorough))
    return out
