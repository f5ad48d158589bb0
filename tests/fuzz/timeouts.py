"""A time limit on one fuzz case, and the stage it was in when the limit struck.

`benchmarks/fuzz.py` runs each random case under `limit(seconds)`: past it, SIGALRM raises
`CaseTimeout` in the case's own code (planning, lowering, the interpreter, the reference, or
the wait on the emulator's process, which `subprocess` then kills). `CaseTimeout` is a
BaseException, not an Exception: the harness's `except Exception` (which turns a crash into
a compile or run failure) lets it through, and so does Hypothesis, which neither retries
nor shrinks it. `stage(exc)` names where it struck, from its traceback: the stage of the outermost
napkin frame past the driver, with the innermost one's file, line and function.
`tests/fuzz/test_regressions.py` runs a case saved as a timeout under the same limit.
"""

from __future__ import annotations

import signal
import traceback
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# napkin's subpackages (and modules) -> the stage of a case they run (longest prefix wins)
STAGES = {
    "diagrams": "load",
    "compiler": "plan",
    "codegen": "lower",
    "runtime": "run",
    "runtime/interpret": "interpret",
    "runtime/emulate": "emulate",
    "runtime/emulated": "emulate",
    "runtime/reference": "reference",
    "runtime/compare": "reference",
    "api": "driver",
}


class CaseTimeout(BaseException):
    """A case ran past its time limit (a BaseException: no `except Exception` takes it)."""

    def __init__(self, seconds: float):
        super().__init__(f"ran past its limit of {seconds:g} s")
        self.seconds = seconds


@contextmanager
def limit(seconds: float | None):
    """Raise CaseTimeout in this (main) thread once `seconds` of wall time have passed; no
    limit for None or 0. Restores the previous handler and timer on the way out."""
    if not seconds:
        yield
        return

    def fire(signum, frame):
        raise CaseTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def stage(exc: BaseException) -> str:
    """Where `exc` was raised, as `stage (path:line in function)`: the stage of the outermost
    frame in napkin's own code (not tests/, benchmarks/ or a library) that is not the driver
    (the interpreter calling compiler/accumulators.py is still interpreting), and the
    innermost such frame's place."""
    frames = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith("<"):          # <string>, <frozen ...>: no file
            continue
        try:
            rel = Path(frame.filename).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            continue
        if not rel.startswith(("tests/", "benchmarks/", ".venv/")):
            frames.append((rel, frame))
    if not frames:
        return "harness"
    names = [_stage_of(rel) for rel, _ in frames]
    name = next((n for n in names if n != "driver"), names[0])
    rel, frame = frames[-1]
    return f"{name} ({rel}:{frame.lineno} in {frame.name})"


def _stage_of(rel: str) -> str:
    keys = [k for k in STAGES if rel == k + ".py" or rel.startswith(k + "/")]
    return STAGES[max(keys, key=len)] if keys else "other"
