"""Building statement lists: nested scopes, fresh names, a value cache per scope, and values
hoisted out of every loop (`invariant`)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from . import program as P


@dataclass(frozen=True)
class Ix:
    """An axis position in scope: its C index expression and, when it walks a register
    array (a whole axis held per thread), the array's local index expression; `whole`: a
    lane's walk of all of the lanes' split axis, which indexes none (they hold shares)."""

    expr: str
    local: str | None = None
    whole: bool = False


class Builder:
    def __init__(self):
        self._stack: list[list] = [[]]
        self._cache: list[dict] = [{}]
        self._count: dict[str, int] = {}
        self._loops: list[tuple[str, int | None]] = []   # enclosing loops: (var, static trips)
        self._hoist: int | None = None     # where `invariant` tables go in the top scope
        self._hoisted: list = []
        self._tables: dict[tuple, str] = {}
        self.fixed: frozenset[str] = frozenset()   # names declared before the hoist point
        self.unrolled: frozenset[str] = frozenset()   # enclosing unrolled constant-trip loops' vars

    @contextlib.contextmanager
    def unrolling(self, var: str, unrolled: bool = True):
        """Inside a loop over `var` of constant trips that is unrolled (`unrolled`): an index
        naming it is a constant once nvcc has unrolled it (accum.local_index checks)."""
        self.unrolled = self.unrolled | {var} if unrolled else self.unrolled
        try:
            yield
        finally:
            self.unrolled = self.unrolled - {var}

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
        static = start == "0" and step == "1" and stop.isdigit() and unroll is True
        if unroll is None:
            unroll = start == "0" and stop.isdigit() and step == "1" and int(stop) <= 64
        self._loops.append((var, int(stop) if static else None))
        try:
            with self.unrolling(var, bool(unroll) and start == "0" and stop.isdigit()
                                and step == "1"):
                body_fn()
        finally:
            self._loops.pop()
        update = f"++{var}" if step == "1" else f"{var} += {step}"
        self.emit(P.For(var, start, f"{var} < {stop}", update, self.close(), unroll, ctype))

    def mark(self) -> tuple[list, int]:
        """The current point of the current scope, where `insert` can later put statements."""
        return self._stack[-1], len(self._stack[-1])

    def insert(self, mark: tuple[list, int], statements: tuple) -> None:
        """`statements` at a `mark`ed point, its scope still open (emitted after what they
        precede, once it is known they are read)."""
        frame, at = mark
        frame[at:at] = statements

    def hoist_here(self, fixed) -> None:
        """Tables of `invariant` go here (the top scope), where the names `fixed` are known."""
        assert len(self._stack) == 1
        self._hoist, self.fixed = len(self._stack[0]), frozenset(fixed)

    def invariant(self, ctype: str, expr: str, prefix: str) -> str:
        """`expr` computed once per thread, before every loop: a table over the enclosing
        unrolled loops of static trip counts whose variables it reads (registers, once
        unrolled), indexed by them here; `expr` itself where it reads anything else (or no
        hoist point is set)."""
        names = set(re.findall(r"[A-Za-z_]\w*", expr))
        trips = dict(self._loops)
        used = [(v, trips[v]) for v, _ in self._loops if v in names]
        if self._hoist is None or any(n not in self.fixed and trips.get(n) is None
                                      for n in names):
            return expr
        key = (expr, tuple(used))          # (the same text under loops of other trip counts:
        name = self._tables.get(key)       # a table of its own)
        if name is None:
            name = self._tables[key] = self.fresh(prefix)
            cell = name + "".join(f"[{v}]" for v, _ in used)
            body = (P.Set(cell, expr),)
            for v, n in reversed(used):
                body = (P.For(v, "0", f"{v} < {n}", f"++{v}", body, True),)
            self._hoisted.append(P.Decl(ctype, name, shape=tuple(n for _, n in used))
                                 if used else P.Decl(f"const {ctype}", name, expr))
            if used:
                self._hoisted.extend(body)
        return name + "".join(f"[{v}]" for v, _ in used)

    @property
    def statements(self) -> tuple:
        assert len(self._stack) == 1
        top = self._stack[0]
        if self._hoist is None:
            return tuple(top)
        return tuple(top[:self._hoist]) + tuple(self._hoisted) + tuple(top[self._hoist:])
