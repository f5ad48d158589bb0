"""Row statistics written out, as one op each (canonical form, compiler/canonical.py):
softmax (`E / sum[x](E)`, E = exp(S - max[x](S))), the variance (`mean[c](D * D)`, D = X -
mean[c](X)) and logsumexp (`max[x](S) + log(sum[x](exp(S - max[x](S))))`), each matched
through names and through values spelt twice (values.same_values). Each rewrite edits the
graph in place and says whether it did. A fully masked row (max -inf) is NaN written out,
and each rewrite keeps what is written: softmax as an op marked `written` (ir.Softmax:
every lowering gives NaN where the built-in gives 0, docs/language.md; `E * V / l` also over
an empty axis, 0 / 0, where `E / l` times V is a sum of nothing, 0), logsumexp by adding
`m - m` (NaN where m is infinite) except over an empty axis, where the written form's
`-inf + log(0)` is the built-in's -inf. The variance needs nothing: its written and
Welford forms agree at sizes 0 (NaN) and 1 (0)."""

from __future__ import annotations

import math

from .graph import DiGraph

from . import ir
from .values import same_values, through

EXPS = ("exp", "exp2")      # a softmax's exponentials (base 2 scales its scores by ln 2)
LN2 = math.log(2.0)


def is_op(g, n, kind, fn=None) -> bool:
    """Whether n is an op of type `kind` (and function `fn`)."""
    op = ir.op(g, n)
    return isinstance(op, kind) and (fn is None or getattr(op, "fn", None) == fn)


def softmax_parts(g: DiGraph, exp_node: int, denominator: int, exps=("exp",)):
    """(S, axes) when exp_node = exp(S - max[axes](S)) and denominator = sum[axes](exp_node)
    (each of the same values: the exponentials or the scores spelt again, values.py); `exps`:
    the exponentials read (softmax's "exp2" too: its S is then S's base-2 exponents)."""
    den = through(g, denominator)
    if not is_op(g, den, ir.Reduce, "sum") or not same_values(g, ir.operands(g, den)[0], exp_node):
        return None
    if not any(is_op(g, exp_node, ir.Map, fn) for fn in exps):
        return None
    axes = ir.op(g, den).axes
    s = centred(g, through(g, ir.operands(g, exp_node)[0]), "max", axes)
    if s is None or ir.type_of(g, exp_node).axes != ir.type_of(g, s).axes:
        return None
    return s, axes


def centred(g: DiGraph, sub: int, fn: str, axes) -> int | None:
    """X where `sub` is X - fn[axes](X) (X spelt again or not, values.same_values), else None."""
    if not is_op(g, sub, ir.Map, "sub"):
        return None
    x, r = ir.operands(g, sub)
    r = through(g, r)
    if not is_op(g, r, ir.Reduce, fn) or set(ir.op(g, r).axes) != set(axes):
        return None
    return x if same_values(g, ir.operands(g, r)[0], x) else None


def softmax(g: DiGraph, n: int) -> bool:
    """E / l or E * V / l (E = exp(S - max[x](S)), l = sum[x](E)) as softmax[x](S), in place."""
    if not is_op(g, n, ir.Map, "div"):
        return False
    num, den = ir.operands(g, n)
    span, stmt = g.nodes[n]["span"], g.nodes[n]["stmt"]
    exp_node = through(g, num)
    parts = softmax_parts(g, exp_node, den, EXPS)
    if parts is not None:  # E / l
        s, axes = parts
        new = _recognised(g, s, axes, "div", span, stmt, exp_node)
        replace(g, n, new)
        return True
    contract = through(g, num)
    if not is_op(g, contract, ir.Contract):
        return False
    args = ir.operands(g, contract)
    for i, arg in enumerate(args):
        parts = softmax_parts(g, through(g, arg), den, EXPS)
        if parts is None or not set(parts[1]) <= set(ir.op(g, contract).axes):
            continue
        s, axes = parts
        soft = _recognised(g, s, axes, "contract", span, stmt, through(g, arg))
        new_args = list(args)
        new_args[i] = soft
        out = ir.type_of(g, contract)
        if out.axes != ir.type_of(g, n).axes:
            return False
        new = ir.add_node(g, ir.op(g, contract), out, new_args, span=span, stmt=stmt)
        replace(g, n, new)
        return True
    return False


def _recognised(g: DiGraph, s: int, axes, written: str, span, stmt, exp_node: int) -> int:
    """softmax[axes](s) as written out (`written`: "div" or "contract", ir.Softmax), of
    `s * ln 2` where `exp_node` is exp2 (2^(S - M) = e^(S ln 2 - M ln 2): base 2 is the
    natural base's softmax of the scaled scores, the running max of S ln 2 is M ln 2)."""
    t = ir.ArrayType(ir.type_of(g, s).axes, ir.INTERMEDIATE)
    if is_op(g, exp_node, ir.Map, "exp2"):
        ln2 = ir.add_node(g, ir.Const(LN2), ir.ArrayType((), ir.INTERMEDIATE), [],
                          span=span, stmt=stmt)
        s = ir.add_node(g, ir.Map("mul"), t, [s, ln2], span=span, stmt=stmt)
    return ir.add_node(g, ir.Softmax(axes, written), t, [s], span=span, stmt=stmt)


def variance(g: DiGraph, n: int) -> bool:
    """mean[c]((X - mean[c](X)) * (X - mean[c](X))) (or `** 2`, `pow(., 2)`) as Welford's
    var[c](X), in place."""
    if not is_op(g, n, ir.Reduce, "mean"):
        return False
    sq = through(g, ir.operands(g, n)[0])
    if is_op(g, sq, ir.Map, "pow"):         # D ** 2, pow(D, 2)
        base, power = ir.operands(g, sq)
        if not is_op(g, through(g, power), ir.Const) or ir.op(g, through(g, power)).value != 2:
            return False
        a = b = through(g, base)
    elif is_op(g, sq, ir.Map, "mul"):
        a, b = (through(g, x) for x in ir.operands(g, sq))
    else:
        return False
    axes = ir.op(g, n).axes
    x = centred(g, a, "mean", axes) if same_values(g, a, b) else None
    if x is None:
        return False
    new = ir.add_node(g, ir.Reduce("var", axes), ir.type_of(g, n), [x],
                      span=g.nodes[n]["span"], stmt=g.nodes[n]["stmt"])
    replace(g, n, new)
    return True


def replace(g: DiGraph, old: int, new: int) -> None:
    """Point every consumer of `old` at `new`, then drop `old`."""
    for _, consumer, data in list(g.out_edges(old, data=True)):
        if g.has_edge(new, consumer):
            g.edges[new, consumer]["ports"] += data["ports"]
        else:
            g.add_edge(new, consumer, array=ir.type_of(g, new), ports=data["ports"])
    g.remove_node(old)


def logsumexp(g: DiGraph, n: int) -> bool:
    """m + log(l) (m = max[x](S), l = sum[x](exp(S - m)), either order) as logsumexp[x](S),
    in place."""
    if not is_op(g, n, ir.Map, "add"):
        return False
    for m, lg in (ir.operands(g, n), ir.operands(g, n)[::-1]):
        lg = through(g, lg)
        if not is_op(g, lg, ir.Map, "log"):
            continue
        den = through(g, ir.operands(g, lg)[0])
        if not is_op(g, den, ir.Reduce, "sum"):
            continue
        exp_node = through(g, ir.operands(g, den)[0])
        parts = softmax_parts(g, exp_node, den)
        if parts is None or not same_values(g, m, ir.operands(g, through(g, ir.operands(
                g, exp_node)[0]))[1]):
            continue
        s, axes = parts
        at = dict(span=g.nodes[n]["span"], stmt=g.nodes[n]["stmt"])
        lse = ir.add_node(g, ir.Reduce("logsumexp", axes), ir.type_of(g, n), [s], **at)
        nan = _nan_where_infinite(g, through(g, m), axes, at)
        replace(g, n, ir.add_node(g, ir.Map("add"), ir.type_of(g, n), [lse, nan], **at))
        return True
    return False


def _nan_where_infinite(g: DiGraph, m: int, axes, at: dict) -> int:
    """`where(size(axes) == 0, 0, m - m)`: NaN where the row's max m is infinite, as
    exp(S - m) is written, but 0 over empty axes, where the written `-inf + log(0)` is -inf."""
    def add(op, axes_, dtype, args):
        return ir.add_node(g, op, ir.ArrayType(axes_, dtype), args, **at)
    t = ir.type_of(g, m)
    count = add(ir.SizeOf(axes[0]), (), ir.INT_INTERMEDIATE, [])
    for a in axes[1:]:
        count = add(ir.Map("mul"), (), ir.INT_INTERMEDIATE,
                    [count, add(ir.SizeOf(a), (), ir.INT_INTERMEDIATE, [])])
    empty = add(ir.Map("eq"), (), "bool", [count, add(ir.Const(0), (), ir.INT_INTERMEDIATE, [])])
    diff = add(ir.Map("sub"), t.axes, t.dtype, [m, m])
    return add(ir.Map("where"), t.axes, t.dtype, [empty, add(ir.Const(0.0), (), t.dtype, []), diff])
