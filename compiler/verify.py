"""Invariants of the graph IR, checked between stages (a failure is napkin's bug)."""

from __future__ import annotations

from .graph import DiGraph, is_dag

from . import ir


class IRInvariantError(AssertionError):
    """The IR broke an invariant: an internal error, never a user mistake."""


_ARITY = {ir.Input: 0, ir.Const: 0, ir.Index: 0, ir.SizeOf: 0, ir.View: 1, ir.Reshape: 1, ir.Contract: 2,
          ir.Reduce: 1, ir.Scan: 1, ir.Softmax: 1, ir.Assign: 1, ir.Output: 1}


def verify(g: DiGraph) -> None:
    """Raise IRInvariantError unless `g` is a well-formed, well-typed napkin IR."""
    _check(is_dag(g), "the graph has a cycle")
    axes = g.graph.get("axes")
    _check(isinstance(axes, dict), "graph has no axes table")
    for key in ("inputs", "outputs", "arrays", "hints", "equations", "source"):
        _check(key in g.graph, f"graph attribute `{key}` missing")
    for u, v, data in g.edges(data=True):
        _check(data["array"] == ir.type_of(g, u), f"edge {u}->{v} carries the wrong type")
        _check(len(data["ports"]) == len(set(data["ports"])) and data["ports"], f"edge {u}->{v} ports")
    for n, data in g.nodes(data=True):
        op, out = data["op"], data["type"]
        _check(isinstance(out, ir.ArrayType), f"node {n} has no ArrayType")
        _check(len(set(out.axes)) == len(out.axes), f"node {n} repeats an axis: {out}")
        _check(all(a in axes for a in out.axes), f"node {n} uses an undeclared axis: {out}")
        args = ir.operands(g, n)
        _check(sorted(p for _, _, d in g.in_edges(n, data=True) for p in d["ports"])
               == list(range(len(args))), f"node {n} has gaps in its ports")
        _check_op(g, n, op, out, [ir.type_of(g, a) for a in args])
    for name, n in g.graph["inputs"].items():
        _check(isinstance(ir.op(g, n), ir.Input) and ir.op(g, n).name == name, f"input {name}")
    for name, n in g.graph["outputs"].items():
        _check(isinstance(ir.op(g, n), ir.Output) and ir.op(g, n).name == name, f"output {name}")
        _check(g.out_degree(n) == 0, f"output {name} has consumers")


def _check_op(g, n, op, out: ir.ArrayType, args: list[ir.ArrayType]) -> None:
    kind = type(op)
    if kind in _ARITY:
        _check(len(args) == _ARITY[kind], f"node {n} ({kind.__name__}) has {len(args)} operands")
    union = tuple(dict.fromkeys(a for t in args for a in t.axes))
    if isinstance(op, ir.Input):
        _check(out.dtype == op.dtype and out.dtype in ir.INPUT_DTYPES, f"input {n} dtype")
    elif isinstance(op, ir.Output):
        _check(out.axes == args[0].axes and out.dtype in ir.OUTPUT_DTYPES, f"output {n}")
        _check(args[0].dtype != "bool", f"output {n} stores a boolean")
        _check(out.dtype not in ir.INT_DTYPES or ir.kind_of_dtype(args[0].dtype) == "int",
               f"output {n} stores floats as integers")
    elif isinstance(op, (ir.Const, ir.SizeOf)):
        _check(out.axes == (), f"scalar node {n} has axes")
    elif isinstance(op, ir.Index):
        _check(out.axes == (op.axis,) and out.dtype == "index", f"index node {n}")
    elif isinstance(op, ir.View):
        _check(len(op.labels) == len(args[0].axes), f"view {n} rank")
        _check(out.axes == tuple(dict.fromkeys(op.labels)), f"view {n} axes")
    elif isinstance(op, ir.Reshape):
        parts = [a for m in out.axes for a in (g.graph["axes"][m].merged or (m,))]
        _check(tuple(parts) == args[0].axes and out.dtype == args[0].dtype, f"reshape {n} axes")
    elif isinstance(op, ir.Gather):
        computed = [lab for lab in op.labels if lab is None]
        _check(len(op.labels) == len(args[0].axes) and len(computed) == len(args) - 1,
               f"gather {n} positions")
        _check(all(ir.kind_of_dtype(t.dtype) == "int" for t in args[1:]), f"gather {n} index kind")
        _check(out.axes == ir.gather_axes(op.labels, [t.axes for t in args[1:]]), f"gather {n} axes")
    elif isinstance(op, ir.Map):
        # (broadcast in the operands' order, or in the layout of the equation's left-hand
        # side where the axes are those: compiler/build._emit)
        _check(sorted(out.axes) == sorted(union) and len(out.axes) == len(union),
               f"map {n} axes {out.axes} != {union}")
        arity = len(ir.FUNCTIONS[op.fn][0]) if op.fn in ir.FUNCTIONS else (
            1 if op.fn in ("neg", "not") else 2)
        _check(len(args) == arity, f"map {n} ({op.fn}) arity")
    elif isinstance(op, ir.Contract):
        summed = set(op.axes)
        _check(all(a in args[0].axes and a in args[1].axes for a in op.axes),
               f"contract {n} sums an axis one operand lacks")
        _check(out.axes == tuple(a for a in union if a not in summed), f"contract {n} axes")
    elif isinstance(op, ir.Reduce):
        _check(op.fn in ir.REDUCTIONS + ir.INTERNAL_REDUCTIONS and set(op.axes) <= set(args[0].axes), f"reduce {n}")
        _check(len(op.axes) == 1 or op.fn not in ir.INDEX_REDUCTIONS, f"{op.fn} {n} over several axes")
        _check(out.axes == tuple(a for a in args[0].axes if a not in op.axes), f"reduce {n} axes")
    elif isinstance(op, ir.Scan):
        _check(op.fn in ir.SCANS and len(op.axes) == 1 and out.axes == args[0].axes, f"scan {n}")
    elif isinstance(op, ir.Softmax):
        _check(set(op.axes) <= set(args[0].axes) and out.axes == args[0].axes, f"softmax {n}")
    elif isinstance(op, ir.Assign):
        _check(set(args[0].axes) <= set(out.axes), f"assign {n} drops axes")
    else:
        _check(False, f"node {n} has an unknown op {op!r}")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise IRInvariantError(message)
