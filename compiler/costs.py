"""The cost model's records: `LevelCost` (M, H, units and transfer time at one memory level)
and `Cost` (a kernel plan's predicted time with its terms), of one plan or of every candidate
of a set (each field then an array; `Cost.at` reads one candidate's cost off it).
`cost.evaluate` (cost.py) computes them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from . import occupancy
from .choices import entries, number


# the compute limits (compiler/issue.py) by the names `bound` gives them
COMPUTE = {"compute": "compute", "issue": "issue slots", "tensor": "tensor cores",
           "fp32": "the FP32 pipe", "mufu": "MUFU (exp, rsqrt, division)",
           "dependent": "the instructions waiting on the products",
           "chained": "the products and what waits on them in each warp",
           "L1 wavefronts": "the L1 (warp loads touching many lines)",
           "lsu": "the LSU (copies into shared memory, ldmatrix)",
           "merged": "issue slots and the merges across warps (barriers, shared memory)"}


@dataclass(frozen=True)
class LevelCost:
    name: str
    capacity: object   # bytes one unit may hold (per candidate for a candidate set)
    M: object          # bytes per unit (number, array, or sympy expression)
    H: object          # bytes crossing in and out, all units
    units: object      # how many units of this level run the kernel
    time: object       # H / bandwidth (seconds), 0 for the top level


@dataclass(frozen=True)
class Cost:
    levels: tuple[LevelCost, ...]
    flops: dict = field(default_factory=dict)     # engine -> FLOPs
    compute_time: object = 0
    time: object = 0                              # predicted seconds
    bound: str | None = ""                        # the term that bounds the time (its name;
                                                  # for a candidate set, None: see at())
    utilization: object = 1.0
    threads: object = 1
    terms: tuple = ()             # (name, seconds): compute, then each memory term
    compute_parts: tuple = ()     # (name, seconds): issue slots and each pipe (issue.py)
    registers: object = None      # estimated registers per thread (occupancy.py)
    blocks_per_sm: object = 1     # resident blocks per SM
    limit: object = 3             # what limits them: an index into occupancy.LIMITS
    computed: object = 1.0        # the share of (block, chunk) pairs computed: the rest a mask
                                  # hides entirely, and the kernel skips (masking.py)
    visited: object = 1.0         # the share the chunk loop visits: a tensor-core kernel
                                  # bounds it by the mask (codegen/masks data_span, index_span)
    stages: object = 2            # a tensor-core kernel's pipeline depth (occupancy.stages)

    def level(self, name: str) -> LevelCost:
        return next(lv for lv in self.levels if lv.name == name)

    @property
    def occupancy_limit(self) -> str:
        """What limits the blocks an SM holds: registers, shared memory, threads or blocks."""
        return occupancy.LIMITS[int(self.limit)]

    def name_bound(self) -> str:
        """The name of the term that bounds the time (the first of the largest); compute is
        named by its largest part."""
        names = [name for name, _ in self.terms]
        times = [t for _, t in self.terms]
        name = names[max(range(len(times)), key=lambda i: times[i])] if times else ""
        if name == "compute" and self.compute_parts:
            parts = dict(self.compute_parts)
            name = COMPUTE[max(parts, key=lambda k: parts[k])]
        return name

    def at(self, i: int, shape: tuple[int, ...]) -> Cost:
        """The cost of candidate `i` of a candidate set flattened to `shape` (numbers)."""
        where = np.unravel_index(i, shape)

        def pick(v):
            return number(entries(v, where))

        def picked(record, skip):
            return type(record)(**{f: getattr(record, f) if f in skip else
                                   pick(getattr(record, f)) for f in record.__dataclass_fields__})
        levels = tuple(picked(lc, ("name",)) for lc in self.levels)
        one = Cost(levels, {k: pick(v) for k, v in self.flops.items()}, pick(self.compute_time),
                   pick(self.time), self.bound, pick(self.utilization), pick(self.threads),
                   tuple((k, pick(v)) for k, v in self.terms),
                   tuple((k, pick(v)) for k, v in self.compute_parts),
                   None if self.registers is None else pick(self.registers),
                   pick(self.blocks_per_sm), pick(self.limit), pick(self.computed),
                   pick(self.visited), pick(self.stages))
        return one if one.bound is not None else replace(one, bound=one.name_bound())
