"""The reference executor: what a diagram means, computed with NumPy.

`evaluate(diagram, inputs)` runs the typed IR in float64 on inputs first
rounded to their storage dtypes: the oracle every compiled form is tested
against. `precision="lowp"` instead computes each op in f32 and rounds its
result to the diagram's least precise storage dtype (a naive low-precision
evaluation, as frameworks do it), for error budgets; `precision="stored"`
computes in float64 but rounds each named array that global memory may hold in
16 bits between kernels (`stored`: name -> dtype, `stored_16bit`) as it is read:
the one rounding the language lets a kernel add (docs/language.md).
"""

from __future__ import annotations

import numpy as np

from ..compiler import ir
from ..compiler.diagram import Diagram
from . import dtypes, elementwise, unused_reads
from .bind import bind_sizes, to_numpy
from .labelled import Labelled, contract, relabel


def evaluate(diagram: Diagram, inputs: dict[str, object], precision: str = "f64",
             sizes: dict[str, int] | None = None, exact: bool = False,
             stored: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Outputs by name: float64 (precision="f64" or "stored": then each array named in
    `stored` rounded to its dtype where it is read) or storage dtype (precision="lowp").

    With `exact` (f64 only) the inputs are taken as the float64 values given instead of
    being rounded to their storage dtype first: the diagram as a function of real
    numbers, what a finite-difference check of its gradient differentiates.
    """
    if precision not in ("f64", "lowp", "stored"):
        raise ValueError(f"precision must be 'f64', 'lowp' or 'stored', not {precision!r}")
    rounded_at = (stored or {}) if precision == "stored" else {}
    g = diagram.ir
    arrays = {name: to_numpy(name, inputs[name], ir.op(g, n).dtype)
              for name, n in g.graph["inputs"].items()}
    sizes = sizes or bind_sizes(diagram, {n: a.shape for n, a in arrays.items()})
    lowp = precision == "lowp"
    compute = np.float32 if lowp else np.float64
    declared = [ir.op(g, n).dtype for n in g.nodes if isinstance(ir.op(g, n), ir.Assign)
                and ir.op(g, n).dtype is not None]     # intermediates stored as declared
    # (an intermediate a plan stores in 16 bits, compiler/stored16.py, takes one of these
    # dtypes: the naive reference's rounding already covers it)
    rounding = dtypes.lowest([s.dtype for s in diagram.inputs + diagram.outputs] + declared) \
        if lowp else None
    values: dict[int, Labelled] = {}
    unrounded: dict[int, Labelled] = {}     # rounded_at's values before rounding
    results: dict[str, np.ndarray] = {}
    unused: dict[int, unused_reads.Outside | None] = {}  # reads outside an axis (not an error yet)
    for n in ir.order(g):
        op, out = ir.op(g, n), ir.type_of(g, n)
        args = [values[a] for a in ir.operands(g, n)]
        held = [unused.get(a) for a in ir.operands(g, n)]
        if not isinstance(op, ir.Gather):  # (an Output or a reduction of such a read raises)
            unused[n] = unused_reads.carried(g, n, args, held)
        if isinstance(op, ir.Input):
            exact_values = exact and not lowp and ir.kind_of_dtype(op.dtype) == "float"
            stored = arrays[op.name] if exact_values else \
                arrays[op.name].astype(dtypes.numpy_dtype(op.dtype))
            values[n] = Labelled(elementwise.as_kind(stored, ir.kind_of_dtype(op.dtype), compute),
                             out.axes)
            continue
        if isinstance(op, ir.Output):
            data = unrounded.get(ir.operands(g, n)[0], args[0]).aligned(out.axes)
            integer = op.dtype in ir.INT_DTYPES
            results[op.name] = dtypes.stored(data, op.dtype)[0] if lowp or integer \
                else np.array(data, dtype=np.float64)
            continue
        if isinstance(op, ir.Gather):
            values[n], unused[n] = unused_reads.gather(g, n, args, held, sizes)
            continue
        val = step(op, out, args, sizes, compute)
        if isinstance(op, ir.Assign) and op.name in rounded_at:
            unrounded[n] = Labelled(val.data, val.axes)     # (its own output: the floor's)
            val.data = dtypes.round_to(val.data, rounded_at[op.name])
        if rounding is not None and val.data.dtype.kind == "f" and not isinstance(op, ir.Index):
            val.data = dtypes.round_to(val.data, rounding)
        values[n] = val
    return results


def stored_16bit(g) -> dict[str, str]:
    """Named float arrays of graph `g` (a diagram's, or a plan's with its stored16 choices)
    that global memory holds in 16 bits and another statement reads (not only their output):
    name -> dtype, what precision="stored" rounds."""
    from ..compiler.arrays import storage_dtype
    found = {}
    for n in g.nodes:
        op = ir.op(g, n)
        if isinstance(op, ir.Assign) and any(not isinstance(ir.op(g, v), ir.Output)
                                             for v in g.successors(n)):
            dtype = storage_dtype(g, n)
            if dtype in ("f16", "bf16"):
                found[op.name] = dtype
    return found


def step(op, out: ir.ArrayType, args: list[Labelled], sizes: dict[str, int], compute) -> Labelled:
    kind = ir.kind_of_dtype(out.dtype)
    if isinstance(op, ir.Const):
        return Labelled(elementwise.as_kind(op.value, kind, compute), ())
    if isinstance(op, ir.Index):
        return Labelled(np.arange(sizes[op.axis], dtype=np.int64), (op.axis,))
    if isinstance(op, ir.SizeOf):
        return Labelled(np.asarray(sizes[op.axis], dtype=np.int64), ())
    if isinstance(op, ir.View):
        return Labelled(relabel(args[0].data, op.labels), out.axes)
    if isinstance(op, ir.Map):
        data = elementwise.apply(op.fn, [a.aligned(out.axes) for a in args])
        full = tuple(sizes[a] for a in out.axes)
        return Labelled(np.broadcast_to(elementwise.as_kind(data, kind, compute), full), out.axes)
    if isinstance(op, ir.Contract):
        return Labelled(contract(args[0], args[1], out.axes).astype(compute, copy=False), out.axes)
    if isinstance(op, ir.Reduce):
        x = args[0]
        dims = tuple(x.axes.index(a) for a in op.axes)
        data = x.data if op.fn in ir.INDEX_REDUCTIONS else elementwise.as_kind(x.data, "float", compute)
        return Labelled(elementwise.as_kind(elementwise.reduce(op.fn, data, dims), kind, compute),
                    out.axes)
    if isinstance(op, ir.Scan):
        x = args[0]
        data = elementwise.as_kind(x.data, "float", compute)
        return Labelled(elementwise.scan(op.fn, data, x.axes.index(op.axes[0])), x.axes)
    if isinstance(op, ir.Softmax):
        x = args[0]
        dims = tuple(x.axes.index(a) for a in op.axes)
        return Labelled(elementwise.softmax(elementwise.as_kind(x.data, "float", compute), dims,
                                            ir.empty_row(op)[0]), x.axes)
    if isinstance(op, ir.Assign):
        data = args[0].aligned(out.axes)
        full = tuple(sizes[a] for a in out.axes)
        return Labelled(np.asarray(np.broadcast_to(data, full), order="C"), out.axes)
    raise TypeError(f"no reference semantics for {op!r}")  # pragma: no cover
