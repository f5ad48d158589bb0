"""Building statement lists: nested scopes, fresh names, and a value cache per scope."""

from __future__ import annotations

from dataclasses import dataclass

from . import program as P


@dataclass(frozen=True)
class Ix:
    """An axis position in scope: its C index expression and, when it walks a register
    array (a whole axis held per thread), the array's local index expression."""

    expr: str
    local: str | None = None


class Builder:
    def __init__(self):
        self._stack: list[list] = [[]]
        self._cache: list[dict] = [{}]
        self._count: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        n = self._count.get(prefix, 0)
        self._count[prefix] = n + 1
        return f"{prefix}{n}"

    def emit(self, stmt) -> None:
        self._stack[-1].append(stmt)

    def open(self) -> None:
        self._stack.append([])
        self._cache.append({})

    def close(self) -> tuple:
        self._cache.pop()
        return tuple(self._stack.pop())

    def cached(self, key):
        for frame in reversed(self._cache):
            if key in frame:
                return frame[key]
        return None

    def remember(self, key, value) -> None:
        self._cache[-1][key] = value

    def value(self, ctype: str, expr: str, prefix: str = "v") -> str:
        """Name `expr` in a const local and return the name."""
        name = self.fresh(prefix)
        self.emit(P.Decl(f"const {ctype}", name, expr))
        return name

    def loop(self, var: str, start: str, stop: str, step: str = "1", body_fn=None,
             unroll: bool | int | None = None, ctype: str = "int") -> None:
        """A for-loop whose body `body_fn()` emits into a fresh scope; unrolled when asked,
        or (unroll None) when it counts from 0 to at most 64 by ones."""
        self.open()
        body_fn()
        update = f"++{var}" if step == "1" else f"{var} += {step}"
        if unroll is None:
            unroll = start == "0" and stop.isdigit() and step == "1" and int(stop) <= 64
        self.emit(P.For(var, start, f"{var} < {stop}", update, self.close(), unroll, ctype))

    @property
    def statements(self) -> tuple:
        assert len(self._stack) == 1
        return tuple(self._stack[0])
