"""The dtype a contraction's operands come in, from the inputs they are read or computed
from (the cost model's tensor rate: model._work; tensorcore._rounded rounds alike)."""

from __future__ import annotations

from . import ir
from .arrays import VIEWS
from .canonical import through
from .graph import DiGraph


def operand_dtype(g: DiGraph, args: list[int]) -> str:
    """The storage dtype a contraction's operands come in: the least precise input reaching it
    (an intermediate beside a 16-bit input is rounded to it on the tensor cores:
    tensorcore._rounded)."""
    found = [d for m in args for d in input_dtypes(g, m)]
    if not found:        # both computed: `relu(A) * relu(B)` runs in A's and B's 16-bit dtype
        found = [d for m in args for d in computed_from(g, m)]    # (tensorcore._computed_dtype)
    return "f32" if "f32" in found or not found else found[0]


def computed_from(g: DiGraph, m: int) -> list[str]:
    """The float dtypes of the inputs m is computed from elementwise or gathers from (a split's
    window `where(.., gather, 0.0)`), f32 where a reduction is on the way."""
    found, stack, seen = [], [m], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        op = ir.op(g, n)
        if isinstance(op, ir.Input):
            found += [op.dtype] if ir.kind_of_dtype(op.dtype) == "float" else []
        elif isinstance(op, (ir.Map, ir.Assign, ir.View)):
            stack.extend(ir.operands(g, n))
        elif isinstance(op, ir.Gather):
            stack.append(ir.operands(g, n)[0])         # (its values are its table's)
        elif not isinstance(op, (ir.Const, ir.Index, ir.SizeOf)):
            return ["f32"]
    return found


def input_dtypes(g: DiGraph, m: int) -> list[str]:
    """The dtype of the input operand m is, through names and views (none: computed)."""
    m = through(g, m)
    op = ir.op(g, m)
    if isinstance(op, ir.Input):
        return [op.dtype]
    if isinstance(op, VIEWS):       # (a view of a computed value: nothing, as the value)
        return input_dtypes(g, ir.operands(g, m)[0])
    return []


__all__ = ["operand_dtype", "computed_from", "input_dtypes"]
