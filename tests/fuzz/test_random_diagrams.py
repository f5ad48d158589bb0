"""Random well-typed diagrams: compiled, interpreted, emulated, compared with the reference.

A failure shrinks (Hypothesis) to a small diagram, which is saved under
`tests/regressions/` (`.napkin` + `.json` with the shape and seed) and from then
on checked by `test_regressions.py`. CI runs a small budget; `benchmarks/fuzz.py`
runs the same checks for as long as it is given (NAPKIN_FUZZ_SCALE multiplies
the budgets here).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

from .gen import diagrams
from .harness import Recorder

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))
EMULATED = max(1, int(14 * SCALE))        # each builds the emitted CUDA with g++ (~1.5 s)
INTERPRETED = max(1, int(150 * SCALE))


def _run(examples: int, emulate: bool) -> None:
    recorder = Recorder()

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(diagrams())
    def check(case):
        recorder.check(case, emulate=emulate)

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
