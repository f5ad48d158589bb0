"""Values a CUDA-core kernel holds in registers at its thread's points (codegen/kernel.py).

A reduction finished before the epilogue (`register`) and a streamed softmax's row
statistics, its max and the reciprocal of its sum (`register_stats`), are register arrays
over the thread's points along `extra` axes; the scalar emitter asks for them by node and
scope (`registered`, `softmax_stats`) instead of computing them again. A reduction the plan
holds before the streamed loop (Model.held_values) is computed into one there
(`compute_held`); none is read in a lane's walk of all of the lanes' split axis, which
holds its share of it only (`_not_whole`, Model.whole_walks). Keys: the node and the index
expressions of its woven axes at the point."""

from __future__ import annotations

import math

from ..compiler import ir
from ..compiler.model import array_name
from ..diagrams.diagnostics import error
from . import accum
from . import program as P
from .builder import Ix


class Registers:
    """Mixed into KernelLowering: needs `g`, `woven`, `registered_values` and `stats` (and to
    compute held reductions `b`, `emitter`, `model`, `points`, `sizes`, `split`, `ways`)."""

    def _point_key(self, n: int, axes, scope) -> tuple:
        return (n,) + tuple((a, scope[a].expr) for a in axes if a in self.woven)

    def register(self, n: int, point: dict, value: str, extra) -> None:
        """A finished reduction's value at a point: a register array over `extra`."""
        key = self._point_key(n, ir.type_of(self.g, n).axes, point)
        self.registered_values[key] = (value, list(extra))

    def register_stats(self, n: int, point: dict, m: str, s: str, extra) -> None:
        """A streamed softmax's row statistics at a point: its max and the reciprocal of its
        sum (register arrays over `extra`)."""
        op = ir.op(self.g, n)
        rows = [a for a in ir.type_of(self.g, n).axes if a not in op.axes]
        self.stats[self._point_key(n, rows, point)] = (m, s, list(extra))

    def softmax_stats(self, n: int, row: dict):
        op = ir.op(self.g, n)
        rows = [a for a in ir.type_of(self.g, n).axes if a not in op.axes]
        entry = self.stats.get(self._point_key(n, rows, row))
        if entry is None:
            return None
        m, s, extra = entry
        self._not_whole(n, extra, row)
        if any(row.get(a) is None or row[a].local is None for a in extra):
            return None     # read at another axis's position (a view): not this array's walk
        idx = accum.local_index(self, extra, row)
        return f"{m}[{idx}]", f"{s}[{idx}]"

    def registered(self, n: int, scope: dict[str, Ix]):
        entry = self.registered_values.get(self._point_key(n, ir.type_of(self.g, n).axes, scope))
        if entry is None:
            return None
        value, extra = entry
        self._not_whole(n, extra, scope)
        if any(scope.get(a) is None or scope[a].local is None for a in extra):
            return None
        return f"{value}[{accum.local_index(self, extra, scope)}]"

    def _not_whole(self, n: int, extra, scope) -> None:
        """A held value is never read in a lane's walk of all of the axis the lanes split: each
        lane holds its share of it only (Model.whole_walks: the planner splits no such axis;
        the value would be computed again at each position, unpriced)."""
        walked = [a for a in extra if scope.get(a) is not None and scope[a].whole]
        if walked:
            raise error("N0604", f"kernel {self.k.name} splits `{walked[0]}` over lanes, and a "
                        f"reduction over it nested in another reads `{array_name(self.g, n)}` "
                        f"at every position of `{walked[0]}`, of which each lane holds its share",
                        help="split another axis over the lanes (--lanes), or none")

    def compute_held(self, p: int) -> None:
        """The reductions the plan holds from pass `p` on (Model.held_values), at each of the
        thread's points: register arrays over their axes but the woven ones (a softmax's: its
        rows'; the lane's share of a split one, accum.extent_of) of their values (a
        softmax's: its rows' max and reciprocal sum), registered where the emitter finds them
        at every position of the loop, each computed once (as the model prices it)."""
        b = self.b
        for n, q in self.model.held_values:
            if q != p:
                continue
            op = ir.op(self.g, n)
            soft = isinstance(op, ir.Softmax)
            extra = [a for a in ir.type_of(self.g, n).axes
                     if a not in self.woven and not (soft and a in op.axes)]
            extent = math.prod(accum.extent_of(self, a) for a in extra)
            for pt in self.points:
                self.line(n)
                arrays = [b.fresh("hv") for _ in range(1 + soft)]
                for array in arrays:
                    b.emit(P.Decl("float", array, None, extent))

                def at(scope, arrays=arrays):
                    values = self.emitter._softmax_row(n, op, ir.operands(self.g, n), scope) \
                        if soft else (self.emitter.number(n, scope),)
                    for array, value in zip(arrays, values):
                        b.emit(P.Set(f"{array}[{accum.local_index(self, extra, scope)}]", value))
                self._shares(extra, dict(pt["scope"]), at)
                if soft:
                    self.register_stats(n, pt["scope"], *arrays, extra)
                else:
                    self.register(n, pt["scope"], arrays[0], extra)

    def _shares(self, axes, scope, fn) -> None:
        """fn(scope) at each position of `axes` a lane holds (its share of a split axis: from
        the lane by the lanes' stride, clamped into the axis), with register-array indices."""
        if not axes:
            fn(scope)
            return
        a, rest = axes[0], axes[1:]
        z, size = self.b.fresh("z"), self.sizes[a]
        w = self.ways if self.split and self.split[0] == a else 1
        at = f"lane + {z} * {w}" if w > 1 else z
        index = f"({at} < {size} ? {at} : {size} - 1)" if w > 1 else at
        self.b.loop(z, "0", str(accum.extent_of(self, a)), "1",     # (unrolled: constant
                    lambda: self._shares(rest, {**scope, a: Ix(index, z)}, fn), unroll=True)
