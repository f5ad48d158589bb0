"""Rendering diagnostics, rustc-style, once, for people (rich) or for tools (JSON).

    error[N0301]: axis `d` vanishes under `+`
      --> attention.napkin:5:14
       |
     5 | S[b h q x] = Q + K
       |              ^^^^^ `d` is on both sides of this `+`
       |
       = help: write `sum[d](...)` to reduce it explicitly
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable

from .diagnostics import Diagnostic, NapkinError, Span

if TYPE_CHECKING:   # rich is imported when there is something to print, not with this module
    from rich.console import Console
    from rich.text import Text

_STYLE = {"error": "bold red", "warning": "bold yellow"}
_TAB = 4
_WIDTH = 200    # source columns shown of a longer line (a generated diagram's)


def _clean(text: str) -> str:
    """Source text made safe to print: tabs expanded, control characters escaped."""
    out = []
    for ch in text:
        if ch == "\t":
            out.append(" " * _TAB)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _display_col(line_text: str, col: int) -> int:
    """0-based display column of 1-based character column `col` after cleaning."""
    return len(_clean(line_text[: max(col - 1, 0)]))


def diagnostics_of(item) -> tuple[Diagnostic, ...]:
    if isinstance(item, NapkinError):
        return item.diagnostics
    if isinstance(item, Diagnostic):
        return (item,)
    return tuple(item)


def render_text(item) -> str:
    """Plain text (no colour) of one error, diagnostic or list of diagnostics."""
    from rich.console import Console
    console = Console(width=10_000, color_system=None, no_color=True, highlight=False,
                      record=True, file=_Null())
    render(item, console)
    return console.export_text()


class _Null:
    def write(self, _):
        return 0

    def flush(self):
        pass


def render(item, console: Console) -> None:
    for diag in diagnostics_of(item):
        console.print(_render_one(diag), highlight=False, soft_wrap=True)


def _render_one(d: Diagnostic) -> Text:
    from rich.text import Text
    t = Text()
    t.append(f"{d.severity}[{d.code}]", style=_STYLE.get(d.severity, "bold"))
    t.append(": ", style="bold")
    t.append(_clean(d.message), style="bold")
    t.append("\n")
    spans = []
    if d.span is not None:
        spans.append((d.span, None, True))
    spans.extend((label.span, label.message, False) for label in d.labels)
    src = d.source
    lines = [s.line for s, _, _ in spans]
    gutter = len(str(max(lines))) if lines else 1
    pad = " " * gutter
    if d.span is not None:
        t.append(f"{pad}--> ", style="bold blue")
        t.append(f"{_clean(d.location())}\n")
    if src is not None and spans:
        t.append(f"{pad} |\n", style="bold blue")
        for line in sorted(set(lines)):
            text = src.line_text(line)
            on_line = sorted((s for s in spans if s[0].line == line),
                             key=lambda s: (not s[2], s[0].col))
            shown, shift = _window(_clean(text), _display_col(text, on_line[0][0].col))
            t.append(f"{line:>{gutter}} | ", style="bold blue")
            t.append(shown + "\n")
            for span, message, primary in on_line:
                t.append(f"{pad} | ", style="bold blue")
                t.append(_underline(text, span, primary, message, shift,
                                    len(shown) if shown != _clean(text) else None),
                         style=_STYLE.get(d.severity) if primary else "bold blue")
                t.append("\n")
        t.append(f"{pad} |\n", style="bold blue")
    for note in d.notes:
        t.append(f"{pad} = ", style="bold blue")
        t.append("note: ", style="bold")
        t.append(_clean(note) + "\n")
    if d.help:
        t.append(f"{pad} = ", style="bold blue")
        t.append("help: ", style="bold")
        t.append(_clean(d.help) + "\n")
    t.rstrip()
    return t


def _window(line: str, col: int) -> tuple[str, int]:
    """A long source line (a generated diagram's) cut to about _WIDTH columns around display
    column `col`, elisions marked `...`, and by how much the shown text is shifted left of the
    line's (underlines are drawn in the shown text's columns)."""
    if len(line) <= _WIDTH:
        return line, 0
    lo = max(min(col - _WIDTH // 3, len(line) - _WIDTH), 0)
    hi = min(lo + _WIDTH, len(line))
    head = "..." if lo > 0 else ""
    return head + line[lo:hi] + ("..." if hi < len(line) else ""), lo - len(head)


def _underline(text: str, span: Span, primary: bool, message: str | None, shift: int = 0,
               shown: int | None = None) -> str:
    """The span's marks under its line as shown (shifted left by `shift`, at most `shown`
    columns wide: a mark outside the shown text is drawn at its edge)."""
    start = _display_col(text, span.col) - shift
    end_col = span.end_col if span.end_line == span.line else len(text) + 1
    end = _display_col(text, end_col) - shift
    if shown is not None:
        start, end = min(max(start, 0), shown - 1), min(end, shown)
    end = max(end, start + 1)
    mark = ("^" if primary else "-") * (end - start)
    return " " * start + mark + (f" {_clean(message)}" if message else "")


def to_json(items: Iterable[Diagnostic]) -> str:
    """Diagnostics as a JSON array (for `--diagnostics json`)."""
    out = []
    for d in items:
        entry = {
            "severity": d.severity,
            "code": d.code,
            "message": d.message,
            "file": d.source.name if d.source is not None else None,
            "span": _span_json(d.span),
            "labels": [{"span": _span_json(lb.span), "message": lb.message} for lb in d.labels],
            "notes": list(d.notes),
            "help": d.help,
        }
        out.append(entry)
    return json.dumps(out, indent=2)


def _span_json(span: Span | None):
    if span is None:
        return None
    return {"line": span.line, "column": span.col, "end_line": span.end_line,
            "end_column": span.end_col, "start": span.start, "end": span.end}
