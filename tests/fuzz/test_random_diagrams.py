"""Random well-typed diagrams on every target: compiled, interpreted, emulated, compared with
the reference.

A failure shrinks (Hypothesis) to a small diagram, which is saved under
`tests/regressions/` (`.napkin` + `.json` with the shape and seed) and from then
on checked by `test_regressions.py`. CI runs a small budget; `benchmarks/fuzz.py`
runs the same checks for as long as it is given (NAPKIN_FUZZ_SCALE multiplies
the budgets here).
"""

from __future__ import annotations


from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .budget import examples
from .gen import diagrams
from .harness import Recorder

# a slice for CI, the full one in the thorough tier (budget.py); benchmarks/fuzz.py runs the
# same strategy for minutes
EMULATED = examples(5, 3)                 # each builds the emitted CUDA with g++ (~1.5 s)
INTERPRETED = examples(60, 30)


# the planner's targets; the paper's two-level model has no threads to emulate
TARGETS = ("h100", "a100", "h200", "hopper-toy")


def _run(examples: int, emulate: bool) -> None:
    recorder = Recorder()
    targets = TARGETS if emulate else TARGETS + ("two-level",)

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(diagrams(), st.sampled_from(targets))
    def check(case, target):
        recorder.check(case, emulate=emulate, target=target, splits=True)

    try:
        check()
    except Exception:
        saved = recorder.save()
        if saved is not None:
            print(f"shrunk failure saved as {saved}")
        raise


def test_random_diagrams_interpreted():
    """Many diagrams through plan, lowering and the schedule interpreter."""
    _run(INTERPRETED, emulate=False)


def test_random_diagrams_emulated():
    """Fewer diagrams all the way through the emitted CUDA on the CPU emulator."""
    _run(EMULATED, emulate=True)
