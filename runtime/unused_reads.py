"""Gathered positions outside their axis where the value read is not used (docs/language.md).

`where(e + 1 < size(e), X[t (e + 1)], 0.0)` reads X one past its last row only where that
branch is not taken. The reference computes every operand over every point, so it reads such a
position clamped to the nearest row (as the emitted CUDA does) and carries, next to each value,
where it holds such a read (`Outside`: per gather that read outside, the first point of its
result that did, at each point of the value, so that N0407 names a read that is used): through
elementwise functions, views, assignments and gathers (a position computed from one, or a row
read from one), and through reductions,
products, softmaxes and scans, whose result holds one wherever a position it folds did (so
`where(ids >= 0, X * W[ids[t] m], 0)` reads rows -1 in a contraction whose result is not
used); `where` keeps only its taken branch's (and its condition's, where the branches differ:
where they agree the value does not depend on it, as in a backward's scatter `where(P[t e_] ==
e, g[t e_], 0)` whose cotangent is 0 where the forward did not use the gathered positions P).
An output that receives such a value uses it: the gather's N0407 is raised there.
The interpreter clamps too and asks the reference whenever one of its gathers read outside.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..compiler import ir
from ..diagrams.diagnostics import NapkinError
from . import elementwise
from .gathers import gathered, out_of_range, positions
from .labelled import Labelled, relabel

# operations through which a value read outside its axis is carried, not used
CARRIED = (ir.Map, ir.View, ir.Assign)
# ... and those that fold it along axes: their result holds it where a position folded did
FOLDING = (ir.Reduce, ir.Contract, ir.Softmax, ir.Scan)


NONE = np.iinfo(np.int64).max     # no read outside at this point


@dataclass(frozen=True)
class Part:
    """The reads outside of one gather that a value holds: at each point of the value, the
    first point of the gather's result (flat, row-major) that read outside, or NONE."""
    first: Labelled                 # int64, broadcastable
    error_at: Callable              # flat point of the gather's result -> its N0407


@dataclass(frozen=True)
class Outside:
    parts: tuple[Part, ...]

    def mask(self, axes: tuple) -> np.ndarray:
        """Where the value holds a read outside an axis (broadcastable, over `axes`)."""
        out = np.zeros((1,) * len(axes), dtype=bool)
        for p in self.parts:
            out = out | (p.first.aligned(axes) != NONE)
        return out

    @property
    def error(self) -> NapkinError:
        """The N0407 of the first read outside still held: its gather's point (not one a
        where dropped on the way)."""
        for p in self.parts:
            low = int(p.first.data.min(initial=NONE))
            if low != NONE:
                return p.error_at(low)
        raise AssertionError("an Outside holds no read")


def _each(h: Outside, fn) -> list[Part]:
    return [Part(fn(p.first), p.error_at) for p in h.parts]


def gather(g, n: int, args: list[Labelled], held: list, sizes: dict):
    """(gather n's value, clamped where a position is outside its axis; its Outside or None)."""
    op, out = ir.op(g, n), ir.type_of(g, n)
    base = args[0].data
    index = [a.aligned(out.axes) for a in args[1:]]
    ranges = [Labelled(np.arange(sizes[lab]), (lab,)).aligned(out.axes)
              for lab in op.labels if lab is not None]
    full = tuple(sizes[a] for a in out.axes)
    value = Labelled(np.broadcast_to(gathered(g, n, base, op.labels, index, ranges, clamp=True),
                                     full), out.axes)
    where = positions(op.labels, index, ranges)
    bad = np.zeros((1,) * len(out.axes), dtype=bool)
    for k, ix in enumerate(where):
        bad = bad | elementwise.outside(ix, base.shape[k])

    def error_at(flat: int) -> NapkinError:
        at = np.unravel_index(flat, full)
        for k, ix in enumerate(where):
            v = int(np.broadcast_to(ix, full)[at])
            if v < 0 or v >= base.shape[k]:
                return out_of_range(g, n, op.labels, k, v, base.shape[k], at)
        raise AssertionError("no position outside at this point")
    found = []
    if bad.any():
        flat = np.arange(int(np.prod(full)), dtype=np.int64).reshape(full)
        found.append(Part(Labelled(np.where(bad, flat, NONE), out.axes), error_at))
    if held[0] is not None:         # rows of the base that hold such a read, read again
        clipped = [np.clip(ix, 0, max(base.shape[k] - 1, 0)) for k, ix in enumerate(where)]
        found += _each(held[0], lambda f: Labelled(np.broadcast_to(
            f.aligned(args[0].axes), base.shape)[tuple(clipped)], out.axes))
    for h in held[1:]:
        if h is not None:
            found += _each(h, lambda f: Labelled(f.aligned(out.axes), out.axes))
    return value, _joined(found)


def carried(g, n: int, args: list[Labelled], held: list) -> Outside | None:
    """Node n's Outside from its operands' (`held`, None for none); raises the N0407 of one
    that the node uses (an output: anything but an elementwise function, a view, an assignment,
    a reduction, a product, a softmax or a scan)."""
    if all(h is None for h in held):
        return None
    op, out = ir.op(g, n), ir.type_of(g, n)
    if isinstance(op, FOLDING):
        return _folded(op, out.axes, args, held)
    if not isinstance(op, CARRIED):
        raise next(h.error for h in held if h is not None)
    if isinstance(op, ir.View):
        (h,), (arg,) = held, args
        return _joined(_each(h, lambda f: Labelled(relabel(np.broadcast_to(
            f.aligned(arg.axes), arg.data.shape), op.labels), out.axes)))
    keep = [True] * len(held)       # where each operand's reads are used
    if isinstance(op, ir.Map) and op.fn == "where":     # only the branch taken is used
        cond = args[0].aligned(out.axes).astype(bool)
        unsure = False if held[0] is None else held[0].mask(out.axes)  # a condition read outside
        if held[0] is not None:     # used only where the branches differ (NaNs differ):
            keep[0] = ~(args[1].aligned(out.axes) == args[2].aligned(out.axes))
        keep[1], keep[2] = cond | unsure, ~cond | unsure
    if isinstance(op, ir.Map) and op.fn == "mul":
        keep = _not_times_zero(args, held, out.axes)
    found = []
    for h, k in zip(held, keep):
        if h is not None:
            found += _each(h, lambda f: Labelled(np.where(k, f.aligned(out.axes), NONE),
                                                 out.axes))
    return _joined(found)


def _folded(op, axes: tuple, args: list[Labelled], held: list) -> Outside | None:
    """A reduction's, product's, softmax's or scan's Outside: the first over the axes it folds
    (those of its operands it drops, and a softmax's or scan's own, along which every position
    depends on the others) for each point of its result."""
    full = tuple(dict.fromkeys(axes + tuple(a for arg in args for a in arg.axes)))
    along = set(op.axes) if isinstance(op, (ir.Softmax, ir.Scan)) else set()
    folded = tuple(i for i, a in enumerate(full) if a not in axes or a in along)
    kept = tuple(a for a in full if a in axes)
    keep = _not_times_zero(args, held, full) if isinstance(op, ir.Contract) else [True] * len(held)

    def fold(k):
        def folded_first(f: Labelled) -> Labelled:
            first = f.aligned(full) if np.all(k) else np.where(k, f.aligned(full), NONE)
            low = first.min(axis=folded, keepdims=True, initial=NONE)   # (no product: no copy)
            return Labelled(low.reshape([low.shape[full.index(a)] for a in kept]), kept)
        return folded_first
    return _joined([p for h, k in zip(held, keep) if h is not None for p in _each(h, fold(k))])


def _not_times_zero(args: list[Labelled], held: list, axes: tuple) -> list:
    """Where each factor of a product is used: not where another factor is exactly 0 (and
    read in bounds), as a backward's `g7 * W[ids[t k] m f]` whose cotangent g7 a where zeroed
    at the ids read outside (0 times the clamped row is 0, as the emitted CUDA computes it)."""
    zero = [(a.aligned(axes) == 0) & (True if h is None else ~h.mask(axes))
            for a, h in zip(args, held)]
    return [~functools.reduce(np.logical_or, [z for j, z in enumerate(zero) if j != i], False)
            for i in range(len(args))]


def _joined(found: list[Part]) -> Outside | None:
    """One Outside for several parts (one per gather: the first point of each), None where no
    point holds a read outside."""
    merged: dict = {}
    for p in found:
        if not (p.first.data != NONE).any():
            continue
        key = p.error_at
        if key in merged:
            axes = tuple(dict.fromkeys(merged[key].first.axes + p.first.axes))
            low = np.minimum(merged[key].first.aligned(axes), p.first.aligned(axes))
            merged[key] = Part(Labelled(low, axes), key)
        else:
            merged[key] = p
    return Outside(tuple(merged.values())) if merged else None
