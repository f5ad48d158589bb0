"""The emulator's error type.

Every failure of an emulated run is an `EmulatorError`: a `NapkinError` with code
N0902 ("emulated kernel failed", diagrams/codes.py) whose message carries the
relevant part of the report; `err.kind` says which failure it was and
`err.report` holds the whole report. A missing g++ is `BackendUnavailable` N0901.
"""

from __future__ import annotations

from napkin.diagrams.diagnostics import BackendUnavailable, Diagnostic, NapkinError

CODE = "N0902"
UNAVAILABLE_CODE = "N0901"

# EmulatorError.kind
BUILD = "build"            # g++ rejected the kernel source
FAULT = "fault"            # found by the emulator: divergent barrier, bad launch, crash, exit status
SANITIZER = "sanitizer"    # AddressSanitizer, UndefinedBehaviorSanitizer or ThreadSanitizer report
TIMEOUT = "timeout"        # the process did not finish in time
ARGUMENTS = "arguments"    # run() arguments that do not match the signatures
KINDS = (BUILD, FAULT, SANITIZER, TIMEOUT, ARGUMENTS)

_REPORT_LINES = 80


class EmulatorError(NapkinError):
    """An emulated kernel could not be built or run, or misbehaved."""

    def __init__(self, kind: str, message: str, report: str = "", help: str | None = None,
                 shown: str | None = None):
        """`shown`: the part of `report` to put in the message (default: all of it, trimmed)."""
        if kind not in KINDS:
            raise ValueError(f"unknown EmulatorError kind {kind!r}")
        self.kind = kind
        self.headline = message  # the message without the report excerpt
        self.report = report
        excerpt = _excerpt(report if shown is None else shown)
        full = f"{message}\n{excerpt}" if excerpt else message
        super().__init__(Diagnostic(CODE, full, help=help))


def _excerpt(report: str) -> str:
    lines = report.strip("\n").splitlines()
    if len(lines) > _REPORT_LINES:
        lines = lines[:_REPORT_LINES] + [f"... ({len(lines) - _REPORT_LINES} more lines)"]
    return "\n".join(lines)


def no_compiler(tool: str) -> BackendUnavailable:
    return BackendUnavailable(Diagnostic(
        UNAVAILABLE_CODE, f"the CPU emulator needs `{tool}`, which is not on PATH",
        help="install g++ (version 12 or newer, with C++20 support)"))


def bad_arguments(message: str) -> EmulatorError:
    return EmulatorError(ARGUMENTS, message)
