"""Random legal plans for the library diagrams, through the interpreter and the emulator,
compared with the reference and with the default plan (see plans.py). A failure, classified
as a compile, run or compare error, is saved under tests/regressions/ with its choices."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from napkin.diagrams.sources import library_names

from .budget import examples
from .harness import Checked, save_regression
from .plans import as_regression, check_plan, describe, planned

# a slice for CI, the full one in the thorough tier (budget.py); benchmarks/fuzz.py runs the
# same strategy for minutes. Each interpreted example costs about 0.5 to 2 CPU-s (9.6 for
# five on a loaded machine), each emulated 1.4
# (one emulated by default since plans may split kernels alone, named_split.py: 13.6 CPU-s
# for two on a quiet machine)
EMULATED = examples(5, 1)
INTERPRETED = examples(14, 3)


def _run(examples: int, emulate: bool) -> None:
    last = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(planned(library_names()))
    def check(case):
        try:
            check_plan(case, emulate=emulate)
        except Checked as exc:
            last[:] = [case, exc.failure]
            raise AssertionError(f"{exc.failure}\n{describe(case)}") from None

    try:
        check()
    except AssertionError:
        if last:
            case, options = as_regression(last[0])
            print(f"saved {save_regression(case, last[1], **options)}")
        raise


def test_random_plans_interpreted():
    _run(INTERPRETED, emulate=False)


def test_random_plans_emulated():
    _run(EMULATED, emulate=True)
