"""An array's name in explain's words and its dtype in global memory, and the bytes per value of
each dtype: what the cost model (model.py, which re-exports them) and the lowering read of an
array beyond its node."""

from __future__ import annotations

from . import ir
from .canonical import through
from .graph import DiGraph

# the same array's values at other labels or shapes: a renaming view, a reshape (local_merge.py)
VIEWS = (ir.View, ir.Reshape)
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "bool": 1, "index": 4, "i32": 4, "i64": 8}


def array_name(g: DiGraph, n: int) -> str:
    """The diagram's name for an array, or `EQ:op` for an op inside equation EQ."""
    op = ir.op(g, n)
    if isinstance(op, (ir.Input, ir.Assign)):
        return op.name
    if isinstance(op, ir.Reshape):      # (local_merge.py: `A[b t (h*d)]`)
        return f"{array_name(g, ir.operands(g, n)[0])}[{' '.join(ir.type_of(g, n).axes)}]"
    for v in g.successors(n):
        if isinstance(ir.op(g, v), ir.Assign) and through(g, v) == n:
            return ir.op(g, v).name
    stmt = g.nodes[n]["stmt"]
    info = next((e for e in g.graph["equations"] if e.stmt == stmt), None)
    if info is not None and info.node == n:      # a statement of its own (nested.py)
        return info.name
    eq = info.name if info is not None else None
    what = type(op).__name__.lower()
    if isinstance(op, ir.Map):
        what = op.fn
    elif isinstance(op, (ir.Reduce,)):
        what = f"{op.fn}[{' '.join(op.axes)}]"
    elif isinstance(op, (ir.Contract, ir.Softmax)):
        what = f"{what}[{' '.join(op.axes)}]"
    return f"{eq}:{what}" if eq else f"%{n}:{what}"


def storage_dtype(g: DiGraph, n: int) -> str:
    """Dtype an array has in global memory: inputs and outputs their own, intermediates their
    declared one (`H[t f]: bf16 = ...`) or the 16-bit one the plan chose for an array only
    tensor-core products read (stored16.py), else f32 (integer ones i64)."""
    op = ir.op(g, n)
    if isinstance(op, ir.Input):
        return op.dtype
    if isinstance(op, VIEWS):           # the array's own memory, relabelled or reshaped
        return storage_dtype(g, ir.operands(g, n)[0])
    for v in g.successors(n):
        if isinstance(ir.op(g, v), ir.Output):
            return ir.op(g, v).dtype
    chosen = g.graph.get("stored16")      # read only by tensor-core products (stored16.py)
    if chosen and through(g, n) in chosen:
        return chosen[through(g, n)]
    for m in [n, *g.successors(n)]:      # a name with a declared dtype (`H[t f]: bf16 = ...`)
        if isinstance(ir.op(g, m), ir.Assign) and ir.op(g, m).dtype is not None \
                and through(g, m) == through(g, n):
            return ir.op(g, m).dtype
    t = ir.type_of(g, n).dtype
    if t == "i64":
        return t
    return t if t in ("f32", "f16", "bf16") else "f32"   # masks are stored as 0.0 / 1.0
