"""How many examples a fuzz slice draws: the default run's (CI's CPU budget, about 400
CPU-s for the whole suite on 2 cores) or the thorough tier's (NAPKIN_FUZZ_SCALE >= 2: the
full slice times the scale). benchmarks/fuzz.py draws from the same strategies for minutes."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))
THOROUGH = SCALE >= 2


def examples(full: int, default: int) -> int:
    """`full` x NAPKIN_FUZZ_SCALE in the thorough tier, `default` x the scale below it."""
    return max(1, int((full if THOROUGH else default) * SCALE))
