"""A kernel's decisions (the planner's search space) and the arithmetic the cost model runs on.

A `Choice` is one kernel's decisions; a `Choices` a candidate set of them (each size a
NumPy array, one entry per candidate, broadcasting to the set's shape). The cost model
(`cost.py`) runs the same code on both, and on sympy symbols: `NUMBERS` does its
arithmetic on numbers and arrays (a choice made on a size is made per candidate),
`Symbols` on sympy expressions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Choice:
    """The decisions of one kernel's plan (the search space)."""

    group: tuple[tuple[str, int], ...] = ()      # level 1: woven axis -> tile (absent: whole)
    stream: tuple[str, int] | None = None        # level 1: streamed axis and chunk
    thread: tuple[tuple[str, int], ...] = ()     # level 2: woven axis -> tile per thread (warp)
    split: tuple[str, int] | None = None         # level 2: reduced axis split over threads
    inner: tuple[str, int] | None = None         # level 2: reduced axis streamed by each thread
    warps: tuple[tuple[str, int], ...] = ()      # tensor cores: warps per block along row, col
    reread: bool = False                         # attention on tensor cores: Q's A fragments
                                                 # re-read from shared memory every chunk, not
                                                 # held in registers (flash.py)
    scatter: bool = False                        # a masked sum run as a scatter-add with
                                                 # atomics (scatter.py); no tiles of its own
    instruction: str = "mma.sync"                # tensor cores: the MMA instruction, mma.sync or
                                                 # Hopper's wgmma (compiler/wgmma.py)


@dataclass(frozen=True)
class Choices:
    """A candidate set of one kernel: Choice's decisions with, for each size, a NumPy array
    (the arrays broadcast to the set's shape, one entry per candidate: a grid of
    candidates can be an open mesh, so what depends on a few sizes is computed once per
    combination of those) or a number all candidates share.

    `split` lists every reduced axis candidates may split, with its ways per candidate (1:
    that candidate does not split it; a candidate splits at most one axis). Every candidate
    is a tensor-core tiling (`warps` given) or none is."""

    group: tuple[tuple[str, object], ...] = ()
    stream: tuple[str, object] | None = None
    thread: tuple[tuple[str, object], ...] = ()
    split: tuple[tuple[str, object], ...] = ()
    inner: tuple[str, object] | None = None
    warps: tuple[tuple[str, object], ...] = ()
    reread: object = False
    instruction: str = "mma.sync"                # every candidate's (Choice.instruction)

    @classmethod
    def of(cls, choice: Choice | Choices) -> Choices:
        """One choice as a candidate set of one (sizes stay numbers or symbols)."""
        if isinstance(choice, Choices):
            return choice
        return cls(choice.group, choice.stream, choice.thread,
                   (choice.split,) if choice.split else (), choice.inner, choice.warps,
                   choice.reread, choice.instruction)

    @functools.cached_property
    def shape(self) -> tuple[int, ...]:
        pairs = self.group + self.thread + self.split + self.warps + \
            tuple(p for p in (self.stream, self.inner) if p)
        return np.broadcast_shapes(*(np.shape(v) for _, v in pairs), np.shape(self.reread))

    def __len__(self) -> int:
        return int(np.prod(self.shape))

    def at(self, i: int, shape: tuple[int, ...] | None = None) -> Choice:
        """Candidate `i` (an index into the set flattened to `shape`, its own by default) as
        a Choice: every listed axis kept, whole or not."""
        shape = self.shape if shape is None else shape
        where = np.unravel_index(i, shape)

        def pairs(ps):
            return tuple((a, int(entries(v, where))) for a, v in ps)
        split = next(((a, w) for a, w in pairs(self.split) if w > 1), None)
        stream = pairs((self.stream,))[0] if self.stream else None
        inner = pairs((self.inner,))[0] if self.inner else None
        return Choice(pairs(self.group), stream, pairs(self.thread), split, inner,
                      pairs(self.warps), bool(entries(self.reread, where)),
                      instruction=self.instruction)


class _Numbers:
    """Arithmetic on numbers and arrays: a choice the model makes on a size is made per
    candidate (plain numbers stay Python numbers: most terms of a candidate set are)."""

    @staticmethod
    def differ(x, y):
        if x is y:
            return False
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            return np.not_equal(x, y)
        return x != y

    @staticmethod
    def where(cond, yes, no):
        if isinstance(cond, np.ndarray) and cond.ndim:
            return np.where(cond, yes, no)
        return yes if cond else no

    @staticmethod
    def maximum(a, b):
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return np.maximum(a, b)
        return max(a, b)

    @staticmethod
    def ceil(x):
        return np.ceil(x) if isinstance(x, np.ndarray) else math.ceil(x)


class Symbols:
    """Arithmetic on sympy expressions: sizes compare structurally (a chunk s_x differs from
    its axis x), the largest column is a Max."""

    def __init__(self):
        import sympy
        self.sympy = sympy

    @staticmethod
    def differ(x, y):
        return x != y

    @staticmethod
    def where(cond, yes, no):
        return yes if cond else no

    def maximum(self, a, b):
        return b if a == 0 else self.sympy.Max(a, b)


NUMBERS = _Numbers()


def entries(v, where: tuple):
    """The entries at `where` (an index into the candidates' shape, of numbers or of arrays
    of them, as np.unravel_index gives) of a term that broadcasts to it; a number is its own
    entry."""
    if not isinstance(v, np.ndarray):
        return v
    where = where[len(where) - v.ndim:]
    return v[tuple(0 if n == 1 else j for n, j in zip(v.shape, where))]


def number(v):
    scalar = isinstance(v, np.generic) or isinstance(v, np.ndarray) and v.ndim == 0
    return v.item() if scalar else v



def multiple_of(x, w: int):
    """Whether `x` (a number or an array of candidates' values) is a multiple of `w`:
    np.mod(x, w) == 0, for a power of two at a fraction of its cost (x / w, its floor and
    that times w are exact for finite x)."""
    if w <= 0 or w & (w - 1):
        return np.mod(x, w) == 0
    return np.floor(x * (1.0 / w)) * w == x


def prod(values):
    """The product, left to right (1 when empty)."""
    values = iter(values)
    for out in values:      # (the first value as it is; a loop is cheaper than next())
        for v in values:
            out = out * v
        return out
    return 1


def total(values):
    """The sum, left to right (0 when empty)."""
    values = iter(values)
    for out in values:
        for v in values:
            out = out + v
        return out
    return 0


def any_of(values):
    """Whether any is true (per candidate; False when empty)."""
    out = False
    for v in values:
        if isinstance(v, np.ndarray):
            out = v if out is False else out | v
        elif v:
            return True
    return out
