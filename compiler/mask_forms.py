"""One spelling of an additive mask (canonical.py's rewrites): every written form of a mask of
`0` and `-inf` added to a softmax's scores becomes `X + where(cond, 0, -inf)` with the scale
on X, the form masking.additive_mask reads (FlashAttention computes X alone where the mask
holds in a whole chunk, folds X's positive scale into its exponent and skips a chunk the mask
hides). Each step keeps every value, NaN and infinity included, to f32 rounding:

    where(c, -inf, 0)              where(not c, 0, -inf)     (c of integers: `negation`)
    -where(c, a, b)                where(c, -a, -b)          (a, b in 0, inf, -inf)
    X - where(c, a, b)             X + where(c, -a, -b)      (x - k is x + -k)
    k * where(c, a, b), W / k      where(c, a, b)            (k a positive scalar)
    (X + M) * k, (X + M) / k       X * k + M                 (M = where(c, 0, -inf))

(`Q * K / 8 - where(x > q, inf, 0)`, `(Q * K + M) / 8` with `M[q x] = where(x <= q, 0,
-inf)`, `Q * K / 8 + 2 * where(...)` all read as `Q * K / 8 + where(x <= q, 0, -inf)`.) A
sum with a declared storage dtype (`T[q x]: f16 = Q * K + M`) is not looked into: its
rounding is the user's. A bias that is not such a mask (an input B[q x], ALiBi's
`-slope * (q - x)`) stays a term of the scores."""

from __future__ import annotations

import math

from . import ir, monotone
from .graph import DiGraph
from .masking import constant
from .values import through
from .written import is_op as _is, replace as _replace

NEGATED = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
_EXTREMES = (0.0, math.inf, -math.inf)


def additive_form(g: DiGraph, n: int) -> bool:
    """Rewrite n, in place, one step toward `X + where(cond, 0, -inf)` (the table above);
    False where n is none of those forms."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Map) or op.fn not in ("where", "neg", "sub", "mul", "div"):
        return False
    at = dict(span=g.nodes[n]["span"], stmt=g.nodes[n]["stmt"])
    args = ir.operands(g, n)
    new = None
    if op.fn == "where":
        cond, a, b = args
        if constant(g, through(g, a)) == -math.inf and constant(g, through(g, b)) == 0.0:
            neg = negation(g, cond, at)
            if neg is not None:
                new = _where(g, neg, 0.0, -math.inf, n, at)
    elif op.fn == "neg" and _constants(g, args[0]) is not None:
        cond, a, b = _constants(g, args[0])
        new = _where(g, cond, -a, -b, n, at)
    elif op.fn == "sub" and _constants(g, args[1]) is not None:
        cond, a, b = _constants(g, args[1])
        mask = _where(g, cond, -a, -b, args[1], at)
        new = ir.add_node(g, ir.Map("add"), ir.type_of(g, n), [args[0], mask], **at)
    elif op.fn in ("mul", "div"):
        new = _scaled(g, n, op.fn, args, at)
    if new is None:
        return False
    _replace(g, n, new)
    return True


def _scaled(g: DiGraph, n: int, fn: str, args, at: dict) -> int | None:
    """A product or quotient by a positive scalar of a mask (the mask) or of a masked sum
    (`X * k + M`), else None."""
    pairs = [(args[0], args[1])] + ([(args[1], args[0])] if fn == "mul" else [])
    for e, k in pairs:
        if not monotone.positive_scalar(g, k):
            continue
        if _constants(g, e) is not None and ir.type_of(g, e).axes == ir.type_of(g, n).axes:
            return through(g, e)
        split = _masked_sum(g, e)
        if split is not None:
            x, mask = split
            scaled = ir.add_node(g, ir.Map(fn), ir.ArrayType(
                ir.type_of(g, x).axes, ir.type_of(g, n).dtype), [x, k] if e == args[0] else
                [k, x], **at)
            return ir.add_node(g, ir.Map("add"), ir.type_of(g, n), [scaled, mask], **at)
    return None


def _masked_sum(g: DiGraph, n: int) -> tuple[int, int] | None:
    """(X, M) where n, through names with no declared dtype, is `X + M` or `M + X`, M a
    mask `where(c, 0, -inf)`; else None."""
    while isinstance(ir.op(g, n), ir.Assign) and ir.op(g, n).dtype is None and \
            ir.type_of(g, n).axes == ir.type_of(g, ir.operands(g, n)[0]).axes:
        n = ir.operands(g, n)[0]
    if not _is(g, n, ir.Map, "add"):
        return None
    a, b = ir.operands(g, n)
    for x, m in ((a, b), (b, a)):
        found = _constants(g, m)
        if found is not None and found[1:] == (0.0, -math.inf) and \
                _constants(g, x) is None:
            return x, m
    return None


def _constants(g: DiGraph, n: int) -> tuple[int, float, float] | None:
    """(cond, a, b) where n, through names, is `where(cond, a, b)` with a and b constants
    among 0, inf and -inf, else None."""
    n = through(g, n)
    if not _is(g, n, ir.Map, "where"):
        return None
    cond, a, b = ir.operands(g, n)
    a, b = constant(g, through(g, a)), constant(g, through(g, b))
    if a is None or b is None or a not in _EXTREMES or b not in _EXTREMES:
        return None
    return cond, a + 0.0, b + 0.0     # (-0.0 as 0.0: the same sum with any score)


def _where(g: DiGraph, cond: int, a: float, b: float, like: int, at: dict) -> int:
    f = ir.type_of(g, like).dtype if ir.kind_of_dtype(ir.type_of(g, like).dtype) == "float" \
        else ir.INTERMEDIATE
    consts = [_constant(g, v, f, at) for v in (a, b)]
    return ir.add_node(g, ir.Map("where"), ir.ArrayType(ir.type_of(g, like).axes, f),
                       [cond] + consts, **at)


def _constant(g: DiGraph, v: float, f: str, at: dict) -> int:
    """A constant spelt as the parser spells it (`-inf` the negation of `inf`), so a
    rewritten mask holds the ops of one written so (and values.same_values matches them)."""
    if v < 0:
        inner = ir.add_node(g, ir.Const(-v), ir.ArrayType((), f), [], **at)
        return ir.add_node(g, ir.Map("neg"), ir.ArrayType((), f), [inner], **at)
    return ir.add_node(g, ir.Const(v), ir.ArrayType((), f), [], **at)


def negation(g: DiGraph, c: int, at: dict) -> int | None:
    """A node for `not c`: a comparison of integers (indices, sizes, integer data) flipped,
    `and` and `or` by De Morgan, `not e` as e; None otherwise (floats: NaN compares false
    both ways)."""
    c = through(g, c)
    op, args = ir.op(g, c), ir.operands(g, c)
    if not isinstance(op, ir.Map):
        return None
    if op.fn == "not":
        return args[0]
    if op.fn in NEGATED and all(ir.kind_of_dtype(ir.type_of(g, u).dtype) == "int"
                                for u in args):
        return ir.add_node(g, ir.Map(NEGATED[op.fn]), ir.type_of(g, c), list(args), **at)
    if op.fn in ("and", "or"):
        parts = [negation(g, u, at) for u in args]
        if None in parts:
            return None
        return ir.add_node(g, ir.Map("or" if op.fn == "and" else "and"), ir.type_of(g, c),
                           parts, **at)
    return None
