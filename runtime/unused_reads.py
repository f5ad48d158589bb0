"""Gathered positions outside their axis where the value read is not used (docs/language.md).

`where(e + 1 < size(e), X[t (e + 1)], 0.0)` reads X one past its last row only where that
branch is not taken. The reference computes every operand over every point, so it reads such a
position clamped to the nearest row (as the emitted CUDA does) and carries, next to each value,
where it holds such a read (`Outside`: a boolean mask over the value's axes and the N0407 of
the first gather that read outside): through elementwise functions, views, assignments and
gathers (a position computed from one, or a row read from one), and through reductions,
products, softmaxes and scans, whose result holds one wherever a position it folds did (so
`where(ids >= 0, X * W[ids[t] m], 0)` reads rows -1 in a contraction whose result is not
used); `where` keeps only its taken branch's (and its condition's, where the branches differ:
where they agree the value does not depend on it, as in a backward's scatter `where(P[t e_] ==
e, g[t e_], 0)` whose cotangent is 0 where the forward did not use the gathered positions P).
An output that receives such a value uses it: the gather's N0407 is raised there.
The interpreter clamps too and asks the reference whenever one of its gathers read outside.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Outside:
    mask: Labelled          # where the value holds a read outside an axis (broadcastable)
    error: NapkinError      # the N0407 of the gather that read there


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
    first = None
    for k, ix in enumerate(where):
        wrong = np.broadcast_to(elementwise.outside(ix, base.shape[k]), full)
        if first is None and wrong.any():
            at = np.unravel_index(int(np.argmax(wrong)), full)
            first = out_of_range(g, n, op.labels, k, int(np.broadcast_to(ix, full)[at]),
                                 base.shape[k], at)
        bad = bad | wrong
    found = [] if first is None else [Outside(Labelled(bad, out.axes), first)]
    if held[0] is not None:         # rows of the base that hold such a read, read again
        mask = np.broadcast_to(held[0].mask.aligned(args[0].axes), base.shape)
        clipped = [np.clip(ix, 0, max(base.shape[k] - 1, 0)) for k, ix in enumerate(where)]
        found.append(Outside(Labelled(mask[tuple(clipped)], out.axes), held[0].error))
    found += [Outside(Labelled(h.mask.aligned(out.axes), out.axes), h.error)
              for h in held[1:] if h is not None]
    return value, _joined(found, out.axes)


def carried(g, n: int, args: list[Labelled], held: list) -> Outside | None:
    """Node n's Outside from its operands' (`held`, None for none); raises the N0407 of one
    that the node uses (anything but an elementwise function, a view or an assignment)."""
    if all(h is None for h in held):
        return None
    op, out = ir.op(g, n), ir.type_of(g, n)
    if isinstance(op, FOLDING):
        return _folded(op, out.axes, args, held)
    if not isinstance(op, CARRIED):
        raise next(h.error for h in held if h is not None)
    if isinstance(op, ir.View):
        (h,), (arg,) = held, args
        mask = np.broadcast_to(h.mask.aligned(arg.axes), arg.data.shape)
        return _joined([Outside(Labelled(relabel(mask, op.labels), out.axes), h.error)], out.axes)
    masks = [None if h is None else h.mask.aligned(out.axes) for h in held]
    if isinstance(op, ir.Map) and op.fn == "where":     # only the branch taken is used
        cond = args[0].aligned(out.axes).astype(bool)
        unsure = False if masks[0] is None else masks[0]   # a condition read outside
        if masks[0] is not None:    # used only where the branches differ (NaNs differ):
            same = args[1].aligned(out.axes) == args[2].aligned(out.axes)
            masks[0] = masks[0] & ~same     # a backward's scatter `where(P == e, g, 0)`
        masks[1] = None if masks[1] is None else masks[1] & (cond | unsure)
        masks[2] = None if masks[2] is None else masks[2] & (~cond | unsure)
    return _joined([Outside(Labelled(m, out.axes), h.error) for m, h in zip(masks, held)
                    if m is not None], out.axes)


def _folded(op, axes: tuple, args: list[Labelled], held: list) -> Outside | None:
    """A reduction's, product's, softmax's or scan's Outside: any over the axes it folds (those
    of its operands it drops, and a softmax's or scan's own, along which every position
    depends on the others) for each point of its result."""
    full = tuple(dict.fromkeys(axes + tuple(a for arg in args for a in arg.axes)))
    along = set(op.axes) if isinstance(op, (ir.Softmax, ir.Scan)) else set()
    folded = tuple(i for i, a in enumerate(full) if a not in axes or a in along)
    kept = tuple(a for a in full if a in axes)
    found = []
    for h in held:
        if h is not None:
            mask = h.mask.aligned(full).any(axis=folded, keepdims=True)
            found.append(Outside(Labelled(mask.reshape([mask.shape[full.index(a)] for a in kept]),
                                          kept), h.error))
    return _joined(found, axes)


def _joined(found: list[Outside], axes: tuple) -> Outside | None:
    """One Outside for several (the first's error), None where no point holds one."""
    found = [f for f in found if f.mask.data.any()]
    if not found:
        return None
    mask = found[0].mask.aligned(axes)
    for f in found[1:]:
        mask = mask | f.mask.aligned(axes)
    return Outside(Labelled(mask, axes), found[0].error)
