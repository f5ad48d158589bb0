"""A deterministic text form of the graph IR (`napkin compile --emit ir`)."""

from __future__ import annotations

from .graph import DiGraph

from . import ir


def format_ir(g: DiGraph) -> str:
    lines = []
    axes = g.graph["axes"]
    parts = []
    for name, info in axes.items():
        size = str(info.size) if info.size is not None else "?"
        same = f"~{info.rep}" if info.rep != name else ""
        parts.append(f"{name}={size}{same}")
    lines.append("axes " + " ".join(parts))
    for h in g.graph["hints"]:
        at = f" at {h.level}" if h.level else ""
        lines.append(f"hint {h.kind} {h.axis} by {h.size}{at}")
    for n in ir.order(g):
        data = g.nodes[n]
        args = " ".join(f"%{a}" for a in ir.operands(g, n))
        text = f"%{n} = {_op_text(data['op'])}"
        if args:
            text += f" {args}"
        text += f" : {data['type']}"
        span = data["span"]
        if span is not None:
            text = text.ljust(48) + f"  # {span.line}:{span.col}"
        lines.append(text)
    return "\n".join(lines) + "\n"


def _op_text(op) -> str:
    if isinstance(op, ir.Input):
        return f"input {op.name}"
    if isinstance(op, ir.Output):
        return f"output {op.name}"
    if isinstance(op, ir.Const):
        return f"const {op.value!r}"
    if isinstance(op, ir.Index):
        return f"index {op.axis}"
    if isinstance(op, ir.SizeOf):
        return f"size {op.axis}"
    if isinstance(op, ir.View):
        return f"view [{' '.join(op.labels)}]"
    if isinstance(op, ir.Reshape):
        return "reshape"
    if isinstance(op, ir.Gather):
        return f"gather [{' '.join(lab or '*' for lab in op.labels)}]"
    if isinstance(op, ir.Map):
        return f"map {op.fn}"
    if isinstance(op, ir.Contract):
        return f"contract[{' '.join(op.axes)}]"
    if isinstance(op, (ir.Reduce, ir.Scan)):
        return f"{op.fn}[{' '.join(op.axes)}]"
    if isinstance(op, ir.Softmax):
        return f"softmax[{' '.join(op.axes)}]" + (f" (written: {op.written})" if op.written else "")
    if isinstance(op, ir.Assign):
        return f"assign {op.name}" + (f" (stored {op.dtype})" if op.dtype else "")
    raise TypeError(op)  # pragma: no cover
