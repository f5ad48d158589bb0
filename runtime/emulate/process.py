"""Running a built emulator as a separate process and turning what it reports
(its own errors, sanitizer reports, signals, timeouts) into `EmulatorError`s."""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import subprocess
from pathlib import Path

from .errors import FAULT, SANITIZER, TIMEOUT, EmulatorError

NAPKIN_ERROR_EXIT = 86  # kErrorExit in napkin_emulate_fiber.h
_NAPKIN_PREFIX = "napkin-emulator: error: "

_SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:allocator_may_return_null=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    "TSAN_OPTIONS": "halt_on_error=1:report_signal_unsafe=0:exitcode=66",
}
_KERNEL_LINE = re.compile(r"(?:^|[/\s(])kernel\.cu:(\d+)")
_SANITIZER_MARKS = ("ThreadSanitizer", "AddressSanitizer", "runtime error:")


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    for name, defaults in _SANITIZER_ENV.items():
        env[name] = defaults + (":" + env[name] if env.get(name) else "")
    return env


def _spawn(cmd: list[str], folder: Path, timeout_s: float) -> tuple[int, str, str]:
    proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", env=_environment(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        raise EmulatorError(TIMEOUT, f"the emulated kernels did not finish within {timeout_s:g} s "
                                     "(a hang, a deadlock between blocks, or too large a problem)",
                            report=(err or "")[-20000:],
                            help="make the problem smaller or raise timeout_s") from None
    return proc.returncode, out, err


def run_emulator(binary: Path, folder: Path, spec: Path, timeout_s: float) -> str:
    """Run the emulator on a spec file in `folder`; return its stdout or raise EmulatorError."""
    cmd = [str(binary), spec.name]
    code, out, err = _spawn(cmd, folder, timeout_s)
    if code != 0 and "unexpected memory mapping" in err and shutil.which("setarch"):
        # ThreadSanitizer of older toolchains cannot map its shadow under high ASLR entropy.
        code, out, err = _spawn(["setarch", platform.machine(), "-R", *cmd], folder, timeout_s)
    if code == 0 and not any(mark in err for mark in _SANITIZER_MARKS):
        return out
    raise _classify(code, err)


def _classify(code: int, err: str) -> EmulatorError:
    napkin = [ln[len(_NAPKIN_PREFIX):] for ln in err.splitlines() if ln.startswith(_NAPKIN_PREFIX)]
    if napkin or code == NAPKIN_ERROR_EXIT:
        rest = "\n".join(ln for ln in err.splitlines() if not ln.startswith(_NAPKIN_PREFIX))
        return EmulatorError(FAULT, napkin[0] if napkin else "the emulator reported an error", report=err,
                             shown=rest)
    for mark in _SANITIZER_MARKS:
        if mark in err:
            headline = next(ln for ln in err.splitlines() if mark in ln).strip().lstrip("=0123456789 ")
            headline = headline.removeprefix("WARNING: ").removeprefix("ERROR: ")
            return EmulatorError(SANITIZER, headline + _kernel_lines(err), report=err)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (or an emulated thread overflowed its 256 KiB stack)" if name == "SIGSEGV" else ""
        return EmulatorError(FAULT, f"the emulated kernel crashed ({name}){hint}; run with "
                                    "sanitize='address' for a diagnosis", report=err)
    return EmulatorError(FAULT, f"the emulator exited with status {code}", report=err)


def _kernel_lines(err: str) -> str:
    """' at kernel.cu:12, kernel.cu:30': the kernel source lines a sanitizer report names."""
    seen: list[str] = []
    for m in _KERNEL_LINE.finditer(err):
        where = f"kernel.cu:{m.group(1)}"
        if where not in seen:
            seen.append(where)
    return f" at {', '.join(seen[:4])}" if seen else ""
