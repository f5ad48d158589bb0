"""Skipping chunks a mask hides entirely (causal attention's upper triangle, windows).

When every streamed reduction of a pass folds `where(cond, e, identity)` (the
identity of its accumulator: -inf for maxima and softmax, 0 for sums; for a contraction,
an operand that is 0 outside `cond`: compiler/masking.zero_unless) and
`cond` is built from axis indices, sizes and constants, interval arithmetic
over the block's index ranges and the chunk's tells whether `cond` can hold
anywhere in the chunk; if it cannot, the whole block skips the chunk (loads,
barriers and all: the test is the same for every thread). Skipping changes no
value: a fully masked chunk leaves every accumulator as it was.
"""

from __future__ import annotations

import math

from ..compiler import ir
from ..compiler.masking import constant, masked_by, product_mask, through_names

IDENTITY = {"max": -math.inf, "logsumexp": -math.inf, "stats": -math.inf, "pair": -math.inf,
            "sum": 0.0, "contract": 0.0}


def interval(g, n: int, box: dict):
    """(lo, hi) C expressions bounding a free index expression over `box`, or None: 64-bit
    integers while every term is an index, a size or a whole constant (no conversions in
    the chunk loop), else doubles."""
    found = _bounds(g, n, box)
    if found is None:
        return None
    lo, hi, whole = found
    return (lo, hi) if whole else (_real(lo, whole), _real(hi, whole))


def _real(e: str, whole: bool) -> str:
    return f"(double)({e})" if whole else e


def _bounds(g, n: int, box: dict):
    """(lo, hi, whole): the bounds, and whether they are integers (`long long`)."""
    n = through_names(g, n)     # a named mask (`M[q x] = x <= q`) as the model reads it
    op = ir.op(g, n)
    if isinstance(op, ir.Index):
        lo, hi = box[op.axis]
        return f"(long long)({lo})", f"(long long)({hi})", True
    if isinstance(op, ir.Const):
        if not math.isfinite(op.value):
            return None
        if float(op.value).is_integer() and abs(op.value) < 2 ** 53:
            return f"{int(op.value)}LL", f"{int(op.value)}LL", True
        return f"{op.value!r}", f"{op.value!r}", False
    if isinstance(op, ir.SizeOf):
        size = box["#size"](op.axis)
        return f"(long long)({size})", f"(long long)({size})", True
    if not isinstance(op, ir.Map):
        return None
    args = ir.operands(g, n)
    if op.fn == "neg":
        a = _bounds(g, args[0], box)
        return None if a is None else (f"(-{a[1]})", f"(-{a[0]})", a[2])
    if op.fn in ("add", "sub"):
        a, b = (_bounds(g, x, box) for x in args)
        if a is None or b is None:
            return None
        whole = a[2] and b[2]
        a0, a1, b0, b1 = (v if whole else _real(v, w) for v, w in
                          ((a[0], a[2]), (a[1], a[2]), (b[0], b[2]), (b[1], b[2])))
        if op.fn == "add":
            return f"({a0} + {b0})", f"({a1} + {b1})", whole
        return f"({a0} - {b1})", f"({a1} - {b0})", whole
    if op.fn == "mul":
        for i in (0, 1):
            c = constant(g, args[i])
            if c is not None and math.isfinite(c):
                a = _bounds(g, args[1 - i], box)
                if a is None:
                    return None
                whole = a[2] and float(c).is_integer() and abs(c) < 2 ** 31
                k = f"{int(c)}LL" if whole else f"{c!r}"
                lo, hi = (a[0], a[1]) if whole else (_real(a[0], a[2]), _real(a[1], a[2]))
                return (f"({k} * {lo})", f"({k} * {hi})", whole) if c >= 0 else \
                    (f"({k} * {hi})", f"({k} * {lo})", whole)
    return None


def can_hold(g, n: int, box: dict) -> str | None:
    """A C expression true when condition n can hold somewhere in `box` (None: unknown)."""
    n = through_names(g, n)
    op = ir.op(g, n)
    if not isinstance(op, ir.Map):
        return None
    args = ir.operands(g, n)
    if op.fn in ("and", "or"):
        a, b = (can_hold(g, x, box) for x in args)
        if op.fn == "and":      # cannot hold where either side cannot: an unknown side may
            known = [t for t in (a, b) if t is not None]    # (compiler/masking._condition)
            return None if not known else f"({' && '.join(known)})"
        return None if a is None or b is None else f"({a} || {b})"
    if op.fn not in ("lt", "le", "gt", "ge", "eq"):
        return None
    a, b = (interval(g, x, box) for x in args)
    if a is None or b is None:
        return None
    return {"lt": f"({a[0]} < {b[1]})", "le": f"({a[0]} <= {b[1]})",
            "gt": f"({a[1]} > {b[0]})", "ge": f"({a[1]} >= {b[0]})",
            "eq": f"({a[0]} <= {b[1]} && {b[0]} <= {a[1]})"}[op.fn]


def must_hold(g, n: int, box: dict) -> str | None:
    """A C expression true when condition n holds everywhere in `box` (None: unknown)."""
    n = through_names(g, n)
    op = ir.op(g, n)
    if not isinstance(op, ir.Map):
        return None
    args = ir.operands(g, n)
    if op.fn in ("and", "or"):
        a, b = (must_hold(g, x, box) for x in args)
        if op.fn == "and":
            return None if a is None or b is None else f"({a} && {b})"
        known = [t for t in (a, b) if t is not None]
        return f"({' || '.join(known)})" if known else None
    if op.fn not in ("lt", "le", "gt", "ge", "eq"):
        return None
    a, b = (interval(g, x, box) for x in args)
    if a is None or b is None:
        return None
    return {"lt": f"({a[1]} < {b[0]})", "le": f"({a[1]} <= {b[0]})",
            "gt": f"({a[0]} > {b[1]})", "ge": f"({a[0]} >= {b[1]})",
            "eq": f"({a[0]} == {a[1]} && {b[0]} == {b[1]} && {a[0]} == {b[0]})"}[op.fn]


def skip_test(lw, reducers, kinds: dict, box: dict) -> str | None:
    """C expression: true when the current chunk is masked for every reducer of the pass."""
    g = lw.g
    tests = []
    for n in reducers:
        kind = kinds[n]
        if kind == "pair":
            arg = ir.operands(g, lw.paired_softmax(n))[0]
        elif kind in ("max", "logsumexp", "sum", "stats"):
            arg = ir.operands(g, n)[0]
        elif kind == "contract":         # a product one of whose operands the mask zeroes
            arg = None
        else:
            return None
        cond = product_mask(g, n) if arg is None else masked_by(g, arg, IDENTITY[kind])
        test = can_hold(g, cond, box) if cond is not None else None
        if test is None:
            return None
        tests.append(test)
    if not tests:
        return None
    return "!(" + " || ".join(tests) + ")"
