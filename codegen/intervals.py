"""Interval arithmetic over a block's index ranges: bounds of an index expression (sizes,
constants, a data leaf's known range) and C tests whether a mask condition can hold, or must
hold, anywhere in a box of positions (codegen/masks.py skips and bounds chunks by them)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from ..compiler import ir, monotone
from ..compiler.masking import constant, through_names


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


# monotone.bounds's operations on C bounds: 64-bit integers (floor, ceil, int and float of
# an integer are itself: the bounds, whole, stay exact), doubles
_WHOLE = SimpleNamespace(floordiv=lambda a, b: f"napkin_floordiv({a}, {b})",
                         floor=lambda a: a, ceil=lambda a: a, int=lambda a: a,
                         float=lambda a: a,
                         minimum=lambda a, b: f"napkin_min({a}, {b})",
                         maximum=lambda a, b: f"napkin_max({a}, {b})")
_REAL = SimpleNamespace(floordiv=lambda a, b: f"floor({a} / {b})", div=lambda a, b: f"({a} / {b})",
                        floor=lambda a: f"floor({a})", ceil=lambda a: f"ceil({a})",
                        int=lambda a: f"trunc({a})", float=lambda a: a,
                        minimum=lambda a, b: f"fmin({a}, {b})",
                        maximum=lambda a, b: f"fmax({a}, {b})")


def _bounds(g, n: int, box: dict):
    """(lo, hi, whole): the bounds, and whether they are integers (`long long`)."""
    n = through_names(g, n)     # a named mask (`M[q x] = x <= q`) as the model reads it
    op = ir.op(g, n)
    known = box.get("#data", {}).get(n)     # an integer input's bounds (data_span)
    if known is not None:
        return f"(long long)({known[0]})", f"(long long)({known[1]})", True
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
    if monotone.readable(g, n):       # (`x // 64`: compiler/monotone.py)
        parts = [_bounds(g, x, box) for x in args]
        if any(p is None for p in parts):
            return None
        whole = all(p[2] for p in parts) and op.fn != "div"
        ops = _WHOLE if whole else _REAL
        lo, hi = monotone.bounds(op.fn, [(p[0], p[1]) if whole else (_real(p[0], p[2]), _real(
            p[1], p[2])) for p in parts], ops)
        return lo, hi, whole
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
    return _holds(g, n, box, everywhere=False)


def must_hold(g, n: int, box: dict) -> str | None:
    """A C expression true when condition n holds everywhere in `box` (None: unknown)."""
    return _holds(g, n, box, everywhere=True)


# a comparison's test over two intervals a = (lo, hi), b = (lo, hi): somewhere, everywhere
_SOMEWHERE = {"lt": "({a0} < {b1})", "le": "({a0} <= {b1})", "gt": "({a1} > {b0})",
              "ge": "({a1} >= {b0})", "eq": "({a0} <= {b1} && {b0} <= {a1})"}
_EVERYWHERE = {"lt": "({a1} < {b0})", "le": "({a1} <= {b0})", "gt": "({a0} > {b1})",
               "ge": "({a0} >= {b1})", "eq": "({a0} == {a1} && {b0} == {b1} && {a0} == {b0})"}


def _holds(g, n: int, box: dict, everywhere: bool) -> str | None:
    """can_hold (everywhere False) and must_hold (True): duals. A connective whose sides must
    both be known is `or` somewhere (either may hold) and `and` everywhere; the other keeps
    its known sides (an unknown side may or may not hold: compiler/masking._condition)."""
    n = through_names(g, n)
    op = ir.op(g, n)
    known = box.get("#data", {}).get(n)      # a boolean input as the condition
    if known is not None and not everywhere:
        return f"((long long)({known[1]}) > 0)"
    if not isinstance(op, ir.Map):
        return None
    args = ir.operands(g, n)
    if op.fn in ("and", "or"):
        a, b = (_holds(g, x, box, everywhere) for x in args)
        joined = " && " if op.fn == "and" else " || "
        if op.fn == ("and" if everywhere else "or"):
            return None if a is None or b is None else f"({a}{joined}{b})"
        sides = [t for t in (a, b) if t is not None]
        return f"({joined.join(sides)})" if sides else None
    if op.fn not in ("lt", "le", "gt", "ge", "eq"):
        return None
    a, b = (interval(g, x, box) for x in args)
    if a is None or b is None:
        return None
    rule = (_EVERYWHERE if everywhere else _SOMEWHERE)[op.fn]
    return rule.format(a0=a[0], a1=a[1], b0=b[0], b1=b[1])
