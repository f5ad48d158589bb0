"""Chunks a mask hides entirely: the condition, read off the IR (causal attention's, a mask
read from integer inputs), and what the kernel folds into its accumulators (the softmax's
scale, its row logsumexp).

The lowering skips a chunk of the streamed axis when every streamed reduction folds
`where(cond, e, identity)` and `cond`, built from axis indices, sizes, constants (through
affine and monotone functions: monotone.py) and integer or boolean inputs read at axis
positions, cannot hold anywhere in the block's index ranges and the chunk's (codegen/masks.py:
the tensor-core attention copies such a chunk and does not compute it; the CUDA-core kernel
skips it whole; a mask read from data bounds the chunk loop). `chunk_mask` reads that
condition off the IR as a small expression; `fractions.py` counts, per candidate tiling, the
share of (block, chunk) pairs the kernel computes."""

from __future__ import annotations

import math

import numpy as np

from . import bias_fold, ir, monotone, row_state
from .graph import ancestors
from .row_state import alone, scores_of

COMPARISONS = ("lt", "le", "gt", "ge", "eq")
READ = ("neg", "add", "sub", "mul", "and", "or") + COMPARISONS     # (and monotone.py's)


def chunk_mask(g, st, loads=(), nodes=()) -> tuple | None:
    """The condition under which a chunk is computed (an expression of tuples), or None when
    the kernel never skips one. `loads`: the kernel's loads (a data leaf is an input the
    kernel itself reads)."""
    pairs = dict(st.pairs)
    soft_of = {c: s for s, c in pairs.items()}
    conds = []
    for n, _ in st.reducers:
        op = ir.op(g, n)
        probs = row_state.of_probabilities(g, st, n)
        if n in soft_of or probs is not None:     # (a sum or max of P: its softmax's state)
            soft = soft_of[n] if n in soft_of else probs[0]
            cond = masked_by(g, ir.operands(g, soft)[0], -math.inf)
        elif isinstance(op, ir.Reduce) and op.fn in ("max", "logsumexp", "sum"):
            cond = masked_by(g, ir.operands(g, n)[0], 0.0 if op.fn == "sum" else -math.inf)
        elif isinstance(op, ir.Contract):
            cond = product_mask(g, n)
        else:
            return None
        expr = readable(g, cond, st.axis, loads, nodes) if cond is not None else None
        if expr is None:
            return None
        conds.append(expr)
    for s, _ in st.stats:
        cond = masked_by(g, ir.operands(g, s)[0], -math.inf)
        expr = readable(g, cond, st.axis, loads, nodes) if cond is not None else None
        if expr is None:
            return None
        conds.append(expr)
    if not conds:
        return None
    conds = list(dict.fromkeys(conds))     # (a softmax and a logsumexp of one masked score)
    out = conds[0]
    for c in conds[1:]:
        out = ("or", out, c)
    return out


def paired_condition(g, st) -> int | None:
    """The condition node of an online softmax's mask `where(cond, S, -inf)` (the one pair of
    an attention kernel, or the scores whose row statistics it streams alone:
    row_state.alone), or None."""
    if len(st.pairs) != 1 and (st.pairs or alone(g, st) is None):
        return None
    return masked_by(g, scores_of(g, st), -math.inf)


def condition_nodes(g, st, loads=(), nodes=()) -> frozenset:
    """The ops computing an attention's mask condition (paired_condition and what it is made
    of, down to indices, sizes and constants; an additive mask's `where(cond, 0, -inf)`,
    additive_mask: evaluated where the mask cuts a chunk only, as the condition)."""
    cond = paired_condition(g, st)
    if cond is None or _expr(g, cond, data=(st.axis, frozenset(loads), frozenset(nodes))) is None:
        return frozenset()
    added = additive_mask(g, unscaled(g, scores_of(g, st)))
    return frozenset({cond} | ancestors(g, cond) | ({added[2]} if added else set()))


def additive_mask(g, n: int) -> tuple[int, int, int] | None:
    """(the sum, its other term X, the mask) where n is `X + where(cond, 0, -inf)` (either
    order, through names): for a finite X the where-form's `where(cond, X, -inf)`, as
    masked_by reads it; the attention kernel computes X alone where the mask holds in the
    whole chunk (codegen/flash.py) and folds X's positive scale (softmax_scale)."""
    n = through_names(g, n)
    if ir.op(g, n) != ir.Map("add"):
        return None
    a, b = ir.operands(g, n)
    for other, term in ((a, b), (b, a)):
        term = through_names(g, term)
        if ir.op(g, term) == ir.Map("where"):
            _, then, otherwise = ir.operands(g, term)
            if constant(g, then) == 0 and constant(g, otherwise) == -math.inf:
                return n, other, term
    return None


def through_names(g, n: int) -> int:
    """Through names (in any layout) to the op that makes the values."""
    while isinstance(ir.op(g, n), ir.Assign):
        n = ir.operands(g, n)[0]
    return n


def masked_by(g, n: int, identity: float):
    """The condition node outside of which n is `identity`: n is where(cond, e, identity)
    (through names and a positive scale, which keeps 0 and -inf: `where(x <= q, S, -inf) /
    8`), or for -inf a term of it (`S + where(x <= q, 0, -inf)`, for finite other terms:
    _minus_infinity_unless) and for 0 an exp of such a term, else None."""
    if identity == -math.inf:
        return _minus_infinity_unless(g, n)
    n = unscaled(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.Map) and op.fn == "where":
        cond, _, other = ir.operands(g, n)
        v = constant(g, other)
        if v is not None and v == identity:
            return cond
    if identity == 0.0 and op == ir.Map("exp"):     # (a row sum of exp: row_state.py)
        return _minus_infinity_unless(g, ir.operands(g, n)[0])
    return None


def unscaled(g, n: int) -> int:
    """n through names and products or quotients by positive scalars (positive_scalar)."""
    n = through_names(g, n)
    op = ir.op(g, n)
    while isinstance(op, ir.Map) and op.fn in ("mul", "div"):
        a, c = ir.operands(g, n)
        if op.fn == "mul" and monotone.positive_scalar(g, a):
            a, c = c, a
        if not monotone.positive_scalar(g, c):
            break
        n = through_names(g, a)
        op = ir.op(g, n)
    return n


def product_mask(g, n: int):
    """The condition outside of which contraction n adds nothing: one operand is 0 there
    (`zero_unless`), else None."""
    for m in ir.operands(g, n):
        cond = zero_unless(g, m)
        if cond is not None:
            return cond
    return None


def zero_unless(g, n: int):
    """A condition node outside of which the value of n is 0, or None when none is known:
    `where(c, e, 0)` (c), `where(c, 0, e)` (e's), products and quotients (either factor's,
    the dividend's), negation, and `exp` of a value that is -inf outside c (`where(c, e,
    -inf)`, shifted by another term or scaled by a positive constant). What is known is
    for finite operands: an infinity or NaN in the other factor, or in the term that
    shifts an exponent, at a position outside c is not seen (as FlashAttention's chunk
    skipping does not see one in V under a causal mask)."""
    n = through_names(g, n)
    op = ir.op(g, n)
    if not isinstance(op, ir.Map):
        return None
    args = ir.operands(g, n)
    if op.fn == "where":
        cond, e, other = args
        if constant(g, other) == 0.0:
            return cond
        if constant(g, e) == 0.0:
            return zero_unless(g, other)
        return None
    if op.fn == "mul":
        return _either(zero_unless(g, args[0]), lambda: zero_unless(g, args[1]))
    if op.fn in ("div", "neg"):
        return zero_unless(g, args[0])
    if op.fn == "exp":
        return _minus_infinity_unless(g, args[0])
    return None


def _minus_infinity_unless(g, n: int):
    """A condition node outside of which n is -inf (for finite other terms), or None."""
    n = through_names(g, n)
    op = ir.op(g, n)
    if not isinstance(op, ir.Map):
        return None
    args = ir.operands(g, n)
    if op.fn == "where":
        cond, _, other = args
        return cond if constant(g, other) == -math.inf else None
    if op.fn in ("add", "sub"):
        return _either(_minus_infinity_unless(g, args[0]), lambda: (
            _minus_infinity_unless(g, args[1]) if op.fn == "add" else None))
    if op.fn in ("mul", "div") and unscaled(g, n) != n:
        return _minus_infinity_unless(g, unscaled(g, n))
    return None


def _either(found, otherwise):
    """`found` (a node, possibly 0) unless None, else what `otherwise()` finds."""
    return found if found is not None else otherwise()


def constant(g, n: int) -> float | None:
    """The value of a constant expression (a number, or minus one), else None."""
    op = ir.op(g, n)
    if isinstance(op, ir.Const):
        return op.value
    if isinstance(op, ir.Map) and op.fn == "neg":
        v = constant(g, ir.operands(g, n)[0])
        return None if v is None else -v
    return None


UNKNOWN = ("unknown",)      # a conjunct read from data (a gather): may hold, may fail anywhere
DATA_DTYPES = ("i32", "i64", "bool")


class PlanningData:
    """An integer or boolean input's values given for planning (`napkin explain --data`): the
    model counts the chunks its mask skips on them. Hashes by content, so plans and the
    fraction cache key on it. The values keep the dtype they were given in (plan.planning_data
    refuses floats with N0608, then converts integers and booleans to int64): a conversion
    here had made 0.7 a document id 0 before the check could see a float."""

    def __init__(self, name: str, values):
        import hashlib
        self.name = name
        self.values = np.ascontiguousarray(values)
        self.values.setflags(write=False)
        digest = hashlib.sha1(repr((self.values.shape, self.values.dtype.str)).encode()
                              + self.values.tobytes())
        self.digest = digest.hexdigest()

    def __hash__(self):
        return hash(self.digest)

    def __eq__(self, other):
        return isinstance(other, PlanningData) and other.digest == self.digest

    def __repr__(self):
        return f"PlanningData({self.name}, {self.values.shape}, {self.digest[:12]})"


def data_leaf(g, n: int):
    """(input node, its name, the axis each of its dimensions is read along) when n, through
    names, is an integer or boolean input read at axis positions (as declared, or renamed:
    varlen's `doc[q]` beside `doc[x]`), else None: the leaf of a mask read from data."""
    n = through_names(g, n)
    op = ir.op(g, n)
    labels = None
    if isinstance(op, ir.View):
        labels, n = op.labels, through_names(g, ir.operands(g, n)[0])
        op = ir.op(g, n)
    if not isinstance(op, ir.Input) or op.dtype not in DATA_DTYPES:
        return None
    return n, op.name, tuple(labels if labels is not None else ir.type_of(g, n).axes)


def _condition(g, n: int, axis: str | None = None, loads=(), nodes=()):
    """The condition at n as `_expr` reads it (with integer and boolean inputs read at axis
    positions as ("data", name, labels, values or None, axis) leaves: `axis` is the streamed
    one), except that a conjunct `_expr` cannot read (a comparison of gathered values) is
    UNKNOWN, which may hold anywhere: `a and b` cannot hold where `a` cannot, whatever `b`
    is. None when nothing of it can be read. (The lowering's `codegen/masks.can_hold` reads
    a conjunction the same way.)"""
    n = through_names(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.Map) and op.fn in ("and", "or"):
        a, b = (_condition(g, m, axis, loads, nodes) for m in ir.operands(g, n))
        if op.fn == "or":
            return None if {a, b} & {None, UNKNOWN} else ("or", a, b)
        if {a, b} <= {None, UNKNOWN}:
            return None
        return ("and", UNKNOWN if a is None else a, UNKNOWN if b is None else b)
    found = _expr(g, n, data=(axis, frozenset(loads), frozenset(nodes)))
    return UNKNOWN if found is None else found


def readable(g, cond: int, axis: str | None = None, loads=(), nodes=()):
    """`_condition` of a mask's condition node, or None when no part of it can be read."""
    found = _condition(g, cond, axis, loads, nodes)
    return None if found is None or found == UNKNOWN else found


def _expr(g, n: int, data: tuple | None = None):
    """The condition or index expression at n as tuples, or None when it is not one of
    indices, sizes and constants (and, with `data` = (the streamed axis, the kernel's
    loads), data leaves of inputs the kernel reads)."""
    if data is not None:
        leaf = data_leaf(g, n)
        view = through_names(g, n)
        if leaf is not None and leaf[0] in data[1] and (view == leaf[0] or view in data[2]):
            ref = g.graph.get("data", {}).get(leaf[1])
            return ("data", leaf[1], leaf[2], ref, data[0])
    n = through_names(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.Index):
        return ("index", op.axis)
    if isinstance(op, ir.SizeOf):
        return ("size", op.axis)
    if isinstance(op, ir.Const):
        return ("const", op.value) if math.isfinite(op.value) else None
    if not isinstance(op, ir.Map) or op.fn not in READ and not monotone.readable(g, n):
        return None             # (`x // 64`: monotone.py)
    args = [_expr(g, m, data) for m in ir.operands(g, n)]
    if any(a is None for a in args):
        return None
    if op.fn == "mul" and not any(a[0] == "const" for a in args):
        return None
    return (op.fn, *args)


_SHOWN = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "div": "/", "and": "and",
          "or": "or", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}


def describe(expr) -> tuple[str, bool]:
    """(the readable part of a chunk mask in the diagram's notation, whether a part read
    from data was left out): `(("and", UNKNOWN, ("le", x, q)))` is ("x <= q", True)."""
    if expr == UNKNOWN:
        return "", True
    kind = expr[0]
    if kind == "index":
        return expr[1], False
    if kind == "size":
        return f"size({expr[1]})", False
    if kind == "const":
        v = expr[1]
        return (str(int(v)) if float(v).is_integer() else repr(v)), False
    if kind == "neg":
        inner, left = describe(expr[1])
        return (f"-({inner})" if " " in inner else f"-{inner}"), left
    if kind == "cut":
        return describe(expr[1])
    if kind == "data":
        return f"{expr[1]}[{' '.join(expr[2])}]", False
    parts = [describe(e) for e in expr[1:]]
    left = any(lo for _, lo in parts)
    shown = [t for t, _ in parts if t]
    if kind in monotone.ONE + monotone.BOTH:
        return f"{kind}({', '.join(shown)})", left
    if kind == "and" and len(shown) == 1:
        return shown[0], left
    # a compound operand in parentheses where it binds: and/or, a product, a quotient, a
    # difference's right side (`q - (size(q) - 5)` read `q - size(q) - 5`)
    inner = f" {_SHOWN[kind]} ".join(
        f"({t})" if " " in t and (kind in ("and", "or", "mul") + monotone.DIVISIONS or
                                  kind == "sub" and i) else t
        for i, t in enumerate(shown))
    return inner, left


def softmax_scale(g, soft: int) -> int | None:
    """scores_scale of a softmax's argument."""
    return scores_scale(g, ir.operands(g, soft)[0])


def scores_scale(g, scores: int) -> int | None:
    """The node `X * c` or `X / c` (c a positive scalar: sizes, positive constants, their
    products, quotients and square roots) that a softmax's argument is, maybe under a mask
    `where(cond, ., -inf)` and beside a bias `X * c + B` (bias_fold.py), with X a
    contraction: FlashAttention's softmax scale. A positive factor keeps the row's order, so
    the attention kernel folds it into its exponent (codegen/flash.py) and the issue model
    charges it nothing (compiler/issue.py). None when the argument is anything else (a cap)."""
    arg = _term(g, scores)
    added = bias_fold.biased(g, arg)
    if added is not None:
        return added[1]
    return arg if bias_fold.scaled(g, arg) else None


def scores_bias(g, scores: int) -> tuple[int, int, int, bool, int] | None:
    """bias_fold.biased of a softmax's argument (under its mask): (the sum, the scale, B,
    whether B is under the scale, B's sign)."""
    return bias_fold.biased(g, _term(g, scores))


def _term(g, scores: int) -> int:
    """A softmax's argument through names, its positive scale and its mask."""
    arg = through_names(g, scores)
    inner = unscaled(g, arg)
    if masked_by(g, inner, -math.inf) is not None and ir.op(g, inner) == ir.Map("where"):
        arg = through_names(g, ir.operands(g, inner)[1])
    elif additive_mask(g, arg) is not None:     # (X * c + where(cond, 0, -inf))
        arg = through_names(g, additive_mask(g, arg)[1])
    return arg
