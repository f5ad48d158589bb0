"""Axis sizes across the whole diagram: classes of axes forced equal, each with one size.

Positional renaming (`Kp[t e]`) gives `t` the size of `Kp`'s first axis, so the
two axes fall into one class. A class has at most one static size; two
different static sizes are an error naming both places.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..diagrams.diagnostics import Label, NapkinError, Span, error


@dataclass(frozen=True)
class _Static:
    size: int
    span: Span | None
    why: str  # "declared", "set by -D" ...


class SizeClasses:
    def __init__(self):
        self._parent: dict[str, str] = {}
        self._static: dict[str, _Static] = {}

    def add(self, name: str, size: int | None = None, span: Span | None = None,
            why: str = "declared") -> None:
        self._parent.setdefault(name, name)
        if size is not None:
            self._static[name] = _Static(size, span, why)

    def find(self, name: str) -> str:
        root = name
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[name] != root:
            self._parent[name], name = root, self._parent[name]
        return root

    def size(self, name: str) -> int | None:
        s = self._static.get(self.find(name))
        return s.size if s else None

    def union(self, a: str, b: str, span: Span | None, context: str) -> None:
        """Force axes `a` and `b` to one size; `context` says why (shown on conflict)."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        sa, sb = self._static.get(ra), self._static.get(rb)
        if sa and sb and sa.size != sb.size:
            raise _conflict(a, sa, b, sb, span, context)
        # Keep the alphabetically first name as representative: deterministic.
        keep, drop = (ra, rb) if ra < rb else (rb, ra)
        self._parent[drop] = keep
        if sa or sb:
            self._static[keep] = sa or sb
        self._static.pop(drop, None)

    def names(self) -> list[str]:
        return list(self._parent)


def _conflict(a: str, sa: _Static, b: str, sb: _Static, span: Span | None,
              context: str) -> NapkinError:
    labels = []
    if sa.span is not None:
        labels.append(Label(sa.span, f"`{a}` is {sa.size} ({sa.why} here)"))
    if sb.span is not None and sb.span != sa.span:
        labels.append(Label(sb.span, f"`{b}` is {sb.size} ({sb.why} here)"))
    same = a if a == b else f"`{a}` and `{b}`"
    return error(
        "N0303",
        f"{context} forces {same} to one size, but they are {sa.size} and {sb.size}"
        if a != b else f"{context}: axis `{a}` would be both {sa.size} and {sb.size}",
        span, labels=labels,
        help="rename the axis so the sizes can differ, or make the declared sizes agree")
