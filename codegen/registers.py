"""Values a CUDA-core kernel holds in registers at its thread's points (codegen/kernel.py).

A reduction finished before the epilogue (`register`) and a streamed softmax's row
statistics, its max and the reciprocal of its sum (`register_stats`), are register arrays
over the thread's points along `extra` axes; the scalar emitter asks for them by node and
scope (`registered`, `softmax_stats`) instead of computing them again. Keys: the node and
the index expressions of its woven axes at the point."""

from __future__ import annotations

from ..compiler import ir
from ..compiler.model import array_name
from ..diagrams.diagnostics import error
from . import accum
from .builder import Ix


class Registers:
    """Mixed into KernelLowering: needs `g`, `woven`, `registered_values` and `stats`."""

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
