"""Monotone index functions in a mask: the operations of an index expression whose bounds
over a box are the operation of its operands' bounds, beside the affine ones (add, sub,
neg, a product by a constant: masking._expr reads those itself).

`x // 64 <= q // 64` (block-causal attention) compares indices through floor divisions:
a floor division or a quotient by a positive scalar (a constant, a size:
positive_scalar), floor, ceil, int (toward zero) and float are nondecreasing in their one
operand, and minimum and maximum in both; so over a box their least value is at the operands' least values and their
greatest at the greatest. One rule, `bounds`, for the model's count of the chunks a mask
hides (compiler/fractions.py, numpy over the candidate tilings) and the lowering's test of
a chunk (codegen/intervals.py, C expressions): they skip the same chunks.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from . import ir
from .values import through

ONE = ("floor", "ceil", "int", "float")       # nondecreasing in their one operand
BOTH = ("minimum", "maximum")                 # ... in both
DIVISIONS = ("floordiv", "div")               # ... in the dividend, by a positive scalar
FUNCTIONS = ONE + BOTH + DIVISIONS

# bounds' operations on the model's arrays of bounds (compiler/fractions.py)
NUMPY = SimpleNamespace(floordiv=np.floor_divide, div=np.true_divide, floor=np.floor,
                        ceil=np.ceil, int=np.trunc, float=lambda a: a, minimum=np.minimum,
                        maximum=np.maximum)


def readable(g, n: int) -> bool:
    """Whether op n (a Map) is one of these whose bounds `bounds` gives: a division's
    divisor must be a positive scalar (a division by a negative one, or by an index, is
    not nondecreasing in the dividend)."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Map) or op.fn not in FUNCTIONS:
        return False
    return op.fn not in DIVISIONS or positive_scalar(g, ir.operands(g, n)[1])


def bounds(fn: str, args, ops):
    """(lo, hi) of `fn` over its operands' bounds `args` ((lo, hi) each), with `ops` the
    operations on them (NUMPY, or codegen/intervals.py's C)."""
    if fn in DIVISIONS:           # (the divisor a scalar: its lo is its value)
        (a0, a1), (b, _) = args
        f = getattr(ops, fn)
        return f(a0, b), f(a1, b)
    if fn in ONE:
        ((a0, a1),) = args
        f = getattr(ops, fn)
        return f(a0), f(a1)
    (a0, a1), (b0, b1) = args
    f = getattr(ops, fn)
    return f(a0, b0), f(a1, b1)


def positive_scalar(g, n: int) -> bool:
    """Whether n is a positive scalar: a size, a positive constant, their products,
    quotients and square roots (a softmax's scale, a divisor keeping a quotient's order)."""
    if ir.type_of(g, n).axes:
        return False
    n = through(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.SizeOf):
        return True
    if isinstance(op, ir.Const):
        return math.isfinite(op.value) and op.value > 0
    if isinstance(op, ir.Map) and op.fn in ("sqrt", "rsqrt", "mul", "div"):
        return all(positive_scalar(g, m) for m in ir.operands(g, n))
    return False
