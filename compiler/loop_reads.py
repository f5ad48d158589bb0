"""Which of a CUDA-core kernel's loops over a row read each load (issue_simt.loop_reads prices
them).

Without a stream, the lowering walks a row once per reduction over it and once per output
along it (codegen/scalar.py: `for (j = lane; j < n; j += w)`, issue_simt.lane_loops), and each
such loop reads the staged values it needs from shared memory again: no row is held in
registers from one loop to the next. cross_entropy's logits are read three times, by the
logsumexp's two loops (its maximum, then the sum of exponentials) and by the label's sum;
softmax's by its statistics' two loops and by the output's. The model's register-level H
counts a load once per op reading it (cross_entropy: once), so the issue slots of the other
loops' reads were not charged (static SASS/model 1.24, h100).

A load is read by the loops of the ops it reaches without passing through a reduction over
the row (whose result is one value per row, held in a register): the reductions, and the
stores along the row (a normalisation such as softmax keeps the row and is read again by
its output's loop).
"""

from __future__ import annotations

from . import ir
from .canonical import through
from .graph import DiGraph


def readers(g: DiGraph, kernel, reduced) -> tuple[tuple[int, tuple[int, ...], int], ...]:
    """(load, the reductions and softmaxes over the row whose loops read it, the stores along the
    row that read it) for each load of `kernel` with an axis of `reduced`: what it reaches
    through ops that keep the row (a reduction over it ends the walk)."""
    members = set(kernel.nodes)
    stores = {through(g, s) for s in kernel.stores}
    row = set(reduced)
    out = []
    for n in kernel.loads:
        if not row & set(ir.type_of(g, n).axes):
            continue
        loops, stored, seen = set(), 0, set()
        todo = [v for v in g.successors(n) if v in members]
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            op = ir.op(g, v)
            if not row & set(ir.type_of(g, v).axes):     # one value per row: read no more
                if isinstance(op, (ir.Reduce, ir.Contract)):
                    loops.add(v)
                continue
            if isinstance(op, ir.Softmax):
                loops.add(v)
            if through(g, v) == v and v in stores:
                stored += 1
            todo.extend(u for u in g.successors(v) if u in members)
        out.append((n, tuple(sorted(loops)), stored))
    return tuple(out)
