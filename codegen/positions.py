"""Reads of an array at positions computed from the point's (codegen/scalar.py's Emitter):
a reshape's merged axis split back into its parts, a gather's computed positions clamped to
their axes. Both read from global memory, as a view does (ctx.views counts them)."""

from __future__ import annotations

from ..compiler import ir, local_merge
from .builder import Ix


class PositionReads:
    def _reshape(self, n: int, base: int, scope) -> str:
        """A reshape (compiler/local_merge.py) reads its base at each merged position's parts
        (`(h*d)` = i: h = i / size(d), d = i % size(d)), from global memory as a view does."""
        inner = dict(scope)
        for axis, parts in local_merge.decomposed(self.g, n):
            rest = scope[axis].expr
            for a in reversed(parts[1:]):
                inner[a] = Ix(f"(({rest}) % ({self.ctx.size(a)}))")
                rest = f"(({rest}) / ({self.ctx.size(a)}))"
            inner[parts[0]] = Ix(rest)
        self.ctx.views += 1
        try:
            return self.value(base, inner)
        finally:
            self.ctx.views -= 1

    def _gather(self, op, args, scope) -> str:
        """The array at the positions' values, read as a view reads (from global memory); a
        position outside its axis is clamped to the nearest row (docs/language.md)."""
        base, index = args[0], iter(args[1:])
        inner = dict(scope)
        for axis, label in zip(ir.type_of(self.g, base).axes, op.labels):
            if label is not None:
                inner[axis] = scope[label]
            else:
                i = self.value(next(index), scope)
                ix = self.b.value("long long", f"napkin_clamp_index({i}, {self.ctx.size(axis)})",
                                  "ix")
                if any(self.ctx.varies(s.expr) for s in scope.values()):
                    self.ctx.varying(ix)     # (a position read from the lane's own row)
                inner[axis] = Ix(ix)
        self.ctx.views += 1
        try:
            return self.value(base, inner)
        finally:
            self.ctx.views -= 1
