"""Chunks a mask hides entirely: what the cost model does not charge (causal attention).

The lowering skips a chunk of the streamed axis when every streamed reduction folds
`where(cond, e, identity)` and `cond`, built from axis indices, sizes and constants,
cannot hold anywhere in the block's index ranges and the chunk's (codegen/masks.py: the
tensor-core attention copies such a chunk and does not compute it; the CUDA-core kernel
skips it whole). `chunk_mask` reads that condition off the IR as a small expression;
`computed_fraction` gives, per candidate tiling, the share of (block, chunk) pairs the
kernel computes, by the same interval test on every pair (sampled evenly past 512 ranges
per axis).
"""

from __future__ import annotations

import functools
import math

from .graph import ancestors
import numpy as np

from . import ir
from .canonical import through

SAMPLES = 512
_CMP = ("lt", "le", "gt", "ge", "eq")


def chunk_mask(g, st) -> tuple | None:
    """The condition under which a chunk is computed (an expression of tuples), or None when
    the kernel never skips one."""
    pairs = dict(st.pairs)
    soft_of = {c: s for s, c in pairs.items()}
    conds = []
    for n, _ in st.reducers:
        op = ir.op(g, n)
        if n in soft_of:
            cond = masked_by(g, ir.operands(g, soft_of[n])[0], -math.inf)
        elif isinstance(op, ir.Reduce) and op.fn in ("max", "logsumexp", "sum"):
            cond = masked_by(g, ir.operands(g, n)[0], 0.0 if op.fn == "sum" else -math.inf)
        elif isinstance(op, ir.Contract):
            cond = product_mask(g, n)
        else:
            return None
        expr = readable(g, cond) if cond is not None else None
        if expr is None:
            return None
        conds.append(expr)
    for s, _ in st.stats:
        cond = masked_by(g, ir.operands(g, s)[0], -math.inf)
        expr = readable(g, cond) if cond is not None else None
        if expr is None:
            return None
        conds.append(expr)
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = ("or", out, c)
    return out


def paired_condition(g, st) -> int | None:
    """The condition node of an online softmax's mask `where(cond, S, -inf)` (the one pair of
    an attention kernel), or None."""
    if len(st.pairs) != 1:
        return None
    soft, _ = st.pairs[0]
    return masked_by(g, ir.operands(g, soft)[0], -math.inf)


def condition_nodes(g, st) -> frozenset:
    """The ops computing an attention's mask condition (paired_condition and what it is made
    of, down to indices, sizes and constants)."""
    cond = paired_condition(g, st)
    if cond is None or _expr(g, cond) is None:
        return frozenset()
    return frozenset({cond} | ancestors(g, cond))


def through_names(g, n: int) -> int:
    """Through names (in any layout) to the op that makes the values."""
    while isinstance(ir.op(g, n), ir.Assign):
        n = ir.operands(g, n)[0]
    return n


def masked_by(g, n: int, identity: float):
    """The condition node when n is where(cond, e, identity) (through names), else None."""
    n = through_names(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.Map) and op.fn == "where":
        cond, _, other = ir.operands(g, n)
        v = constant(g, other)
        if v is not None and v == identity:
            return cond
    return None


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
    if op.fn in ("mul", "div"):
        c = constant(g, args[1])
        if c is not None and math.isfinite(c) and c > 0:
            return _minus_infinity_unless(g, args[0])
        c = constant(g, args[0])
        if op.fn == "mul" and c is not None and math.isfinite(c) and c > 0:
            return _minus_infinity_unless(g, args[1])
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


def _condition(g, n: int):
    """The condition at n as `_expr` reads it, except that a conjunct `_expr` cannot read (a
    comparison of gathered values: varlen's `doc[q] == doc[x]`) is UNKNOWN, which may hold
    anywhere: `a and b` cannot hold where `a` cannot, whatever `b` is (so varlen attention
    still skips the chunks its `x <= q` hides). None when nothing of it can be read. (The
    lowering's `codegen/masks.can_hold` reads a conjunction the same way.)"""
    n = through_names(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.Map) and op.fn in ("and", "or"):
        a, b = (_condition(g, m) for m in ir.operands(g, n))
        if op.fn == "or":
            return None if {a, b} & {None, UNKNOWN} else ("or", a, b)
        if {a, b} <= {None, UNKNOWN}:
            return None
        return ("and", UNKNOWN if a is None else a, UNKNOWN if b is None else b)
    found = _expr(g, n)
    return UNKNOWN if found is None else found


def readable(g, cond: int):
    """`_condition` of a mask's condition node, or None when no part of it can be read."""
    found = _condition(g, cond)
    return None if found is None or found == UNKNOWN else found


def _expr(g, n: int):
    """The condition or index expression at n as tuples, or None when it is not one of
    indices, sizes and constants."""
    n = through_names(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.Index):
        return ("index", op.axis)
    if isinstance(op, ir.SizeOf):
        return ("size", op.axis)
    if isinstance(op, ir.Const):
        return ("const", op.value) if math.isfinite(op.value) else None
    if not isinstance(op, ir.Map) or op.fn not in ("neg", "add", "sub", "mul", "and", "or") + _CMP:
        return None
    args = [_expr(g, m) for m in ir.operands(g, n)]
    if any(a is None for a in args):
        return None
    if op.fn == "mul" and not any(a[0] == "const" for a in args):
        return None
    return (op.fn, *args)


_SHOWN = {"add": "+", "sub": "-", "mul": "*", "and": "and", "or": "or", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "eq": "=="}


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
        return f"-{inner}", left
    if kind == "cut":
        return describe(expr[1])
    parts = [describe(e) for e in expr[1:]]
    left = any(lo for _, lo in parts)
    shown = [t for t, _ in parts if t]
    if kind == "and" and len(shown) == 1:
        return shown[0], left
    inner = f" {_SHOWN[kind]} ".join(f"({t})" if kind in ("and", "or") and " " in t else t
                                     for t in shown)
    return inner, left


def axes_of(expr) -> tuple[str, ...]:
    """The axes whose index the expression reads, in a fixed order."""
    if expr[0] == "cut":
        return axes_of(expr[1])
    if expr[0] == "index":
        return (expr[1],)
    if expr[0] in ("size", "const"):
        return ()
    return tuple(sorted({a for e in expr[1:] for a in axes_of(e)}))


def computed_fraction(mask, sizes: dict, tiles: dict):
    """The share of (block, chunk) pairs computed, per candidate: `tiles` gives each masked
    axis's extent per block (a grouped axis's tile, the streamed axis's chunk; a number or
    an array broadcasting to the candidates), an axis not in it is whole. 1.0 without a
    mask."""
    if mask is None:
        return 1.0
    axes = axes_of(mask)
    if not axes:
        return 1.0
    values = [np.asarray(tiles.get(a, sizes[a]), dtype=float) for a in axes]
    shape = np.broadcast_shapes(*(v.shape for v in values))
    flat = np.stack([np.broadcast_to(v, shape).ravel() for v in values], axis=1)
    size_key = tuple(sorted((a, int(v)) for a, v in sizes.items()))
    # once per distinct combination of extents (candidates share most of them)
    distinct, inverse = np.unique(flat, axis=0, return_inverse=True)
    found = np.array([_fraction(mask, size_key, tuple(zip(axes, map(int, t))))
                      for t in distinct], dtype=float)
    out = found[inverse.reshape(-1)].reshape(shape)
    return out.item() if out.ndim == 0 else out


def cut_fraction(mask, sizes: dict, tiles: dict):
    """The share of (block, chunk) pairs the mask cuts: computed, with the condition failing
    somewhere in them (the diagonal of causal attention), per candidate as
    `computed_fraction`; the rest of the computed pairs hold it everywhere (their scores
    need no mask). 1.0 without a mask (every pair evaluates whatever the kernel computes)."""
    if mask is None or not axes_of(mask):
        return 1.0
    return computed_fraction(("cut", mask), sizes, tiles)


@functools.lru_cache(maxsize=4096)
def _fraction(mask, size_key: tuple, extents: tuple) -> float:
    sizes = dict(size_key)
    ranges = []
    for a, e in extents:
        n = sizes[a]
        starts = np.arange(0, n, max(e, 1), dtype=float)
        if len(starts) > SAMPLES:
            starts = starts[np.linspace(0, len(starts) - 1, SAMPLES).astype(int)]
        ranges.append((starts, np.minimum(starts + max(e, 1), n) - 1))
    grids = np.meshgrid(*[np.arange(len(r[0])) for r in ranges], indexing="ij")
    box = {a: (r[0][i], r[1][i]) for (a, _), r, i in zip(extents, ranges, grids)}
    if mask[0] == "cut":       # computed, and not held everywhere
        held = _holds(mask[1], box, sizes) & _fails(mask[1], box, sizes)
    else:
        held = _holds(mask, box, sizes)
    return float(np.mean(np.broadcast_to(held, grids[0].shape))) if grids else 1.0


def _interval(e, box: dict, sizes: dict):
    kind = e[0]
    if kind == "index":
        return box[e[1]]
    if kind == "size":
        return float(sizes[e[1]]), float(sizes[e[1]])
    if kind == "const":
        return float(e[1]), float(e[1])
    if kind == "neg":
        lo, hi = _interval(e[1], box, sizes)
        return -hi, -lo
    a, b = _interval(e[1], box, sizes), _interval(e[2], box, sizes)
    if kind == "add":
        return a[0] + b[0], a[1] + b[1]
    if kind == "sub":
        return a[0] - b[1], a[1] - b[0]
    ends = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])    # mul by a constant
    return np.minimum.reduce(ends), np.maximum.reduce(ends)


def _holds(e, box: dict, sizes: dict):
    """Whether condition e can hold somewhere in the box (per box of the grid)."""
    kind = e[0]
    if kind in ("and", "or"):
        a, b = _holds(e[1], box, sizes), _holds(e[2], box, sizes)
        return (a & b) if kind == "and" else (a | b)
    if kind not in _CMP:
        return True
    a, b = _interval(e[1], box, sizes), _interval(e[2], box, sizes)
    return {"lt": lambda: a[0] < b[1], "le": lambda: a[0] <= b[1], "gt": lambda: a[1] > b[0],
            "ge": lambda: a[1] >= b[0], "eq": lambda: (a[0] <= b[1]) & (b[0] <= a[1])}[kind]()


def _fails(e, box: dict, sizes: dict):
    """Whether condition e can fail somewhere in the box (per box of the grid)."""
    kind = e[0]
    if kind in ("and", "or"):
        a, b = _fails(e[1], box, sizes), _fails(e[2], box, sizes)
        return (a | b) if kind == "and" else (a & b)
    if kind not in _CMP:
        return True
    a, b = _interval(e[1], box, sizes), _interval(e[2], box, sizes)
    return {"lt": lambda: a[1] >= b[0], "le": lambda: a[1] > b[0], "gt": lambda: a[0] <= b[1],
            "ge": lambda: a[0] < b[1],
            "eq": lambda: ~((a[0] == a[1]) & (b[0] == b[1]) & (a[0] == b[0]))}[kind]()


def row_logsumexps(g, st) -> tuple[int, ...]:
    """The streamed reducers that are `logsumexp[x]` of the scores the kernel's one online
    softmax normalises: their value is the softmax's final state per row (m + log l), so
    the attention kernel stores it without a reduction of its own (codegen/flash.py) and
    the issue model charges it nothing per score (compiler/issue.py)."""
    if len(st.pairs) != 1:
        return ()
    soft, out = st.pairs[0]
    scores = through(g, ir.operands(g, soft)[0])
    found = []
    for n, _ in st.reducers:
        op = ir.op(g, n)
        if n != out and isinstance(op, ir.Reduce) and op.fn == "logsumexp" and \
                op.axes == (st.axis,) and through(g, ir.operands(g, n)[0]) == scores:
            found.append(n)
    return tuple(found)


def softmax_scale(g, soft: int) -> int | None:
    """The node `X * c` or `X / c` (c a positive scalar: sizes, positive constants, their
    products, quotients and square roots) that a softmax's argument is, maybe under a mask
    `where(cond, ., -inf)`, with X a contraction: FlashAttention's softmax scale. A positive
    factor keeps the row's order, so the attention kernel folds it into its exponent
    (codegen/flash.py) and the issue model charges it nothing (compiler/issue.py). None when
    the argument is anything else (a bias added, a cap)."""
    arg = through_names(g, ir.operands(g, soft)[0])
    if masked_by(g, arg, -math.inf) is not None:
        arg = through_names(g, ir.operands(g, arg)[1])
    op = ir.op(g, arg)
    if not isinstance(op, ir.Map) or op.fn not in ("mul", "div"):
        return None
    a, c = ir.operands(g, arg)
    if op.fn == "mul" and not isinstance(ir.op(g, through_names(g, a)), ir.Contract):
        a, c = c, a
    if not isinstance(ir.op(g, through_names(g, a)), ir.Contract) or not _positive_scalar(g, c):
        return None
    return arg


def _positive_scalar(g, n: int) -> bool:
    if ir.type_of(g, n).axes:
        return False
    n = through_names(g, n)
    op = ir.op(g, n)
    if isinstance(op, ir.SizeOf):
        return True
    if isinstance(op, ir.Const):
        return math.isfinite(op.value) and op.value > 0
    if isinstance(op, ir.Map) and op.fn in ("sqrt", "rsqrt", "mul", "div"):
        return all(_positive_scalar(g, m) for m in ir.operands(g, n))
    return False
