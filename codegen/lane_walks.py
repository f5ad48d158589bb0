"""How a kernel's lanes walk the axes they hold (KernelLowering's part, read by the scalar
emitter and held.py): which index expressions differ between the lanes of a group, where a
reduction over the split axis runs per lane, and the unrolled trips of a walk (held.py,
compiler/register_arrays.py)."""

from __future__ import annotations

import re

from ..compiler import register_arrays
from . import held


class LaneWalks:
    def varies(self, expr: str) -> bool:
        """Whether an index expression differs between the lanes of a group here: it names
        the lane or a position a uniform walk (held.loops) put the lanes at."""
        names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr))
        return bool(names & {"lane", *self.lane_at} or names & self.lane_read)

    def varying(self, name: str) -> None:
        self.lane_read.add(name)

    def pinned(self, axes, row) -> bool:
        """A reduction over the split axis runs per lane where its row (the index expressions of
        its operands' other axes) differs between the lanes: inside a uniform walk, a view reading
        it at the lane's own position along the walked axis. Any other reduction nested in a
        uniform walk splits and merges by shuffles as outside: every lane makes the walk's trips,
        with the same operands."""
        return bool(self.split) and self.split[0] in axes and not self.serial and \
            any(self.varies(e) for e in row)

    def constant_trips(self, axis: str, ways: int) -> int | None:
        """The unrolled trips of a walk along `axis` that would index a register array at run
        time (compiler/register_arrays.constant_trips), or None."""
        return register_arrays.constant_trips(self.model, axis, self.plan.sizes[axis], ways)

    def unrolled(self, axis: str) -> int | None:
        """Trips of a lane's walk along `axis` the lowering unrolls here (held.py), or None."""
        return held.unrolled(self, axis)

    def lane_offset(self, k: int) -> str:
        return held.lane_offset(self, k)
