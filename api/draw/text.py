"""The words of a picture: box labels, folded constant expressions, wire labels, text widths.

Text is measured, not rendered: the picture uses a monospace font, so a label's
width is its length times a fixed advance. Nothing here knows about positions.
"""

from __future__ import annotations

from ..compiler.graph import DiGraph

from ..compiler import ir

MONO_ADVANCE = 0.62   # advance of one character, in ems (DejaVu Sans Mono: 0.602)

SYMBOLS = {name: sym for sym, (name, _, _) in ir.OPERATORS.items()}
UNARY_SYMBOLS = {name: sym for sym, (name, _, _) in ir.UNARY.items()}
HOLE = "\u00b7"       # stands for an array operand in a formula label: "· / sqrt(size(d))"


def width(text: str, size: float) -> float:
    """Width of `text` set in the picture's monospace font at `size` pixels."""
    return len(text) * size * MONO_ADVANCE


def number(value: float) -> str:
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return format(value, "g")


def axis_label(name: str, size: int | None) -> str:
    """A wire's label: the axis name, with its size when it is fixed at compile time."""
    return name if size is None else f"{name}={size}"


def formula(g: DiGraph, n: int, holes: dict[int, str], top: bool = True) -> str:
    """Text of the expression rooted at `n`; nodes in `holes` are shown as their given text."""
    if n in holes:
        return holes[n]
    o = ir.op(g, n)
    infix = isinstance(o, ir.Contract) or (isinstance(o, ir.Map) and (
        o.fn in SYMBOLS or o.fn in UNARY_SYMBOLS))
    args = [formula(g, u, holes, top=not infix) for u in ir.operands(g, n)]
    if isinstance(o, ir.Const):
        return number(o.value)
    if isinstance(o, ir.Index):
        return o.axis
    if isinstance(o, ir.SizeOf):
        return f"size({o.axis})"
    if isinstance(o, (ir.Input, ir.Assign, ir.Output)):
        return o.name
    if isinstance(o, ir.Map):
        if o.fn in SYMBOLS and len(args) == 2:
            text = f"{args[0]} {SYMBOLS[o.fn]} {args[1]}"
            return text if top else f"({text})"
        if o.fn in UNARY_SYMBOLS and len(args) == 1:
            sym = UNARY_SYMBOLS[o.fn]
            return f"{sym} {args[0]}" if sym == "not" else f"{sym}{args[0]}"
        return f"{o.fn}({', '.join(args)})"
    if isinstance(o, (ir.Reduce, ir.Scan)):
        return f"{o.fn}[{' '.join(o.axes)}]({args[0]})"
    if isinstance(o, ir.Softmax):
        return f"softmax[{' '.join(o.axes)}]({args[0]})"
    if isinstance(o, ir.Contract):
        return f"{args[0]} * {args[1]}" if top else f"({args[0]} * {args[1]})"
    if isinstance(o, ir.View):
        return f"{args[0]}[{' '.join(o.labels)}]"
    if isinstance(o, ir.Gather):
        rest = iter(args[1:])
        return f"{args[0]}[{' '.join(lab or next(rest) for lab in o.labels)}]"
    raise TypeError(f"no text for {o!r}")  # pragma: no cover - every op is covered above


def map_label(g: DiGraph, n: int, folded: set[int]) -> str:
    """The label of an elementwise box: its function, or a formula when constants are folded in.

    `gelu`, `+`; `· / sqrt(size(d))` when an operand is a constant expression;
    `· * ·` when one array feeds several operands.
    """
    o = ir.op(g, n)
    ops = ir.operands(g, n)
    arrays = [u for u in ops if u not in folded]
    if len(arrays) == len(set(arrays)) and len(arrays) == len(ops):
        if o.fn in SYMBOLS:
            return SYMBOLS[o.fn]
        return UNARY_SYMBOLS.get(o.fn, o.fn)
    return formula(g, n, {u: HOLE for u in arrays})


def relabel_label(before: tuple[str, ...], after: tuple[str, ...]) -> str:
    """`m->n` for a view that renames wires (only the positions that change are listed)."""
    pairs = [f"{a}->{b}" for a, b in zip(before, after) if a != b]
    return " ".join(dict.fromkeys(pairs)) or "view"
