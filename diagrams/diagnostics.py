"""Diagnostics: source spans, error codes and the one exception type users see.

Every mistake a user can make is reported as a `NapkinError` holding one or
more `Diagnostic`s. A diagnostic names a code (listed in `codes.py` and in
`docs/errors.md`), a message, the span of the culprit in the diagram, optional
secondary labelled spans, and a `help:` line. Rendering happens once, in
`render.py`; nothing else formats errors for people.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property


@dataclass(frozen=True)
class Source:
    """A diagram's text and the name it is shown under (a path or `<library:NAME>`)."""

    name: str
    text: str

    @cached_property
    def _line_starts(self) -> tuple[int, ...]:
        starts = [0]
        for i, ch in enumerate(self.text):
            if ch == "\n":
                starts.append(i + 1)
        return tuple(starts)

    def position(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def span(self, start: int, end: int | None = None) -> "Span":
        """The span covering text[start:end] (a single character when end is None)."""
        if end is None:
            end = min(start + 1, len(self.text))
        end = max(end, start)
        line, col = self.position(start)
        end_line, end_col = self.position(end)
        return Span(start, end, line, col, end_line, end_col)

    def line_text(self, line: int) -> str:
        starts = self._line_starts
        if not 1 <= line <= len(starts):
            return ""
        begin = starts[line - 1]
        stop = starts[line] - 1 if line < len(starts) else len(self.text)
        return self.text[begin:stop].rstrip("\r")

    @property
    def line_count(self) -> int:
        return len(self._line_starts)


@dataclass(frozen=True, order=True)
class Span:
    """A half-open character range [start, end) with 1-based line/column of both ends."""

    start: int
    end: int
    line: int
    col: int
    end_line: int
    end_col: int

    def merge(self, other: "Span | None") -> "Span":
        if other is None:
            return self
        first = self if self.start <= other.start else other
        last = self if self.end >= other.end else other
        return Span(first.start, last.end, first.line, first.col, last.end_line, last.end_col)

    def shifted(self, offset: int, line: int, col: int) -> "Span":
        """Move a span parsed from a slice that began at (offset, line, col) of the file."""
        first_col = self.col + col - 1 if self.line == 1 else self.col
        last_col = self.end_col + col - 1 if self.end_line == 1 else self.end_col
        return Span(self.start + offset, self.end + offset, self.line + line - 1, first_col,
                    self.end_line + line - 1, last_col)

    def __str__(self) -> str:
        return f"{self.line}:{self.col}"


@dataclass(frozen=True)
class Label:
    """A secondary span with a short message ("first defined here")."""

    span: Span
    message: str


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    span: Span | None = None
    help: str | None = None
    labels: tuple[Label, ...] = ()
    notes: tuple[str, ...] = ()
    severity: str = "error"  # "error" or "warning"
    source: Source | None = field(default=None, compare=False)

    def with_source(self, source: Source | None) -> "Diagnostic":
        if self.source is not None or source is None:
            return self
        return Diagnostic(self.code, self.message, self.span, self.help, self.labels,
                          self.notes, self.severity, source)

    def location(self) -> str:
        name = self.source.name if self.source is not None else "<input>"
        return f"{name}:{self.span.line}:{self.span.col}" if self.span else name


class NapkinError(Exception):
    """A mistake in a diagram or in how napkin was asked to use it.

    Holds one or more diagnostics. `str(err)` is a plain one-line-per-diagnostic
    summary; `napkin.diagrams.render` draws the full rustc-style report.
    """

    exit_code = 1

    def __init__(self, diagnostics, source: Source | None = None):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: tuple[Diagnostic, ...] = tuple(d.with_source(source) for d in diagnostics)
        if not self.diagnostics:
            raise ValueError("NapkinError needs at least one diagnostic")
        super().__init__(self._summary())

    @property
    def code(self) -> str:
        return self.diagnostics[0].code

    @property
    def source(self) -> Source | None:
        return self.diagnostics[0].source

    def _summary(self) -> str:
        parts = []
        for d in self.diagnostics:
            where = f"{d.location()}: " if d.span is not None else ""
            text = f"{where}{d.severity}[{d.code}]: {d.message}"
            if d.help:
                text += f" (help: {d.help})"
            parts.append(text)
        return "\n".join(parts)


class BackendUnavailable(NapkinError):
    """A backend (NVRTC, a GPU, g++) that this request needs is not installed or present."""

    exit_code = 3


class UsageError(NapkinError):
    """A malformed command-line value (exit status 2, like other usage errors)."""

    exit_code = 2


class NapkinLaunchError(NapkinError):
    """An argument passed to a compiled kernel does not match its signature."""


def error(code: str, message: str, span: Span | None = None, help: str | None = None,
          labels=(), notes=(), source: Source | None = None) -> NapkinError:
    """Build (not raise) a NapkinError with a single diagnostic."""
    return NapkinError(Diagnostic(code, message, span, help, tuple(labels), tuple(notes)), source)


def warning(code: str, message: str, span: Span | None = None, help: str | None = None,
            labels=()) -> Diagnostic:
    return Diagnostic(code, message, span, help, tuple(labels), severity="warning")


class Collector:
    """Accumulates diagnostics so one run can report several errors at once."""

    def __init__(self, source: Source | None = None, limit: int = 50):
        self.source = source
        self.limit = limit
        self.errors: list[Diagnostic] = []
        self.warnings: list[Diagnostic] = []

    def add(self, item: "Diagnostic | NapkinError") -> None:
        items = item.diagnostics if isinstance(item, NapkinError) else (item,)
        for d in items:
            d = d.with_source(self.source)
            (self.warnings if d.severity == "warning" else self.errors).append(d)
        if len(self.errors) >= self.limit:
            self.raise_if_any()

    def raise_if_any(self) -> None:
        if self.errors:
            raise NapkinError(self.errors, self.source)


def did_you_mean(name: str, candidates, fallback: str | None = None) -> str | None:
    """A "did you mean `x`?" hint for a misspelt name, else the fallback."""
    import difflib   # on the error path only
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"did you mean `{close[0]}`?" if close else fallback


def one_of(value: str, allowed, what: str) -> str:
    """`value` when it is one of `allowed`, else a usage error (N0804) naming them: an
    option's value given from Python (the command line's choices check their own)."""
    if value not in allowed:
        raise UsageError(error("N0804", f"unknown {what} `{value}`",
                               help=did_you_mean(value, allowed, f"{what}s: " + ", ".join(allowed)))
                         .diagnostics)
    return value
