"""Canonical form of the IR: one spelling for computations that stream the same way.

- Softmax written out (`m = max[x](S)`, `E = exp(S - m)`, `l = sum[x](E)`, then
  `E / l` or `E * V / l`) becomes `softmax[x](S)` (contracted with `V`), so
  `attention_manual` fuses and plans exactly like `attention`.
- `mean[c]((X - mean[c](X)) * (X - mean[c](X)))` (the difference spelt twice or named
  once: values.same_values) becomes an internal variance
  reduction of `X` (Welford's accumulator streams it in one pass).
- A contraction's factors that lack every contracted axis leave the sum
  (`sum[i](N * W)` with `N = X * rsqrt(mean[i](X * X) + eps) * g` is
  `sum[i](X * g * W) * rsqrt(...)`: distributivity), so RMSNorm written before the
  product it feeds plans as `rmsnorm_linear` (the product on the tensor cores with the
  row statistic beside it); not attention's scores (a softmax normalises them), whose
  normalised query and key FlashAttention loads, but for a factor over the axes both
  operands share (`0.125 * Q * K` is `Q * K * 0.125`, `Q * g[h] * K` is `Q * K * g[h]`:
  FlashAttention's loaded Q and K, its scores scaled); nor out of another product reading
  such an operand (QK-norm's backward `dK = dS * Qn`: `gq[d]` taken out of the sum over t
  left `Q * rsqrt(...)` computed, which no chain of products loads; reach.read_by_scores).
  Products are looked through names
  (not a declared dtype's: its rounding is the user's); views of inputs are read anew. Not out of
  one local_merge.py reads as it is (`dWq = dQ * N1` over `(b*t)`, `nest=False`): no
  reshape reads a computed operand, and its two axes stayed on the CUDA cores.
- A sum of a product of two loaded arrays over axes both have, each with an axis of its
  own (`sum[d](Q * K)`), is their contraction, so the product is never made over those
  axes and runs where contractions run (the tensor cores, FlashAttention's scores).
- A sum, max, min, mean or logsumexp over three or more axes is that reduction over the
  operand's last two reduced axes (in its layout), reduced again over the others
  (`sum[a b c](X)` is `sum[a](sum[b c](X))`): a kernel streams one reduced axis and splits
  one more across lanes or blocks, so a third held whole did not fit at large sizes (N0603).
- A contraction over three or more axes is a matrix product over the first operand's last
  contracted axis (in its layout), batched over the others, then summed over them
  (`C[i j] = A[i a b c] * B[a b c j]` is `sum[a b](contract[c](A, B))`, the sum nested as
  above): held whole, a kernel kept two contracted axes whole in shared memory (N0603 at 64
  per axis in f32), and the inner product now runs on the tensor cores. (`nest=False` leaves
  them whole for local_merge.py, which reads a run of their axes adjacent in both operands
  as one axis first; `nested_contractions` then nests what is left.)
- A softmax over three or more axes is written out into those nestable reductions:
  `m = max[K](S)`, `E = exp(S - m)`, `l = sum[K](E)`, `E / l`, with the language's fully
  masked rows (`m = -inf` shifts by 0, `l = 0` gives 0, or NaN for a softmax recognised
  from its written form: ir.Softmax's `written`). A softmax over one axis stays one
  op (attention's online softmax pairs it with its contraction), and so does one over two
  (a kernel streams one and splits the other).
- Axes that always travel together (adjacent, in one order, in every array; named whole by
  every op; never read as values or hinted) become one axis `(h*d)` (merge.py), before the
  nesting above: `O[t h d] * W[h d m]` is one matrix product over `(h*d)`.
- An intermediate every reader reads through one renaming of its axes (self-attention's
  `K[h s d]` of `K[h t d] = X * Wk`) is computed under the readers' names
  (`K[h s d] = X[s m] * Wk`, rename.py), after the rewrites above, which views stop.
- Ops no output depends on are dropped.

`canonicalize` is a pure function: it returns a new graph.
"""

from __future__ import annotations

from .graph import DiGraph, ancestors

from . import ir
from .local_merge import chains_of
from .masking import constant
from .mask_forms import NEGATED as _NEGATED, additive_form as _additive_form, \
    negation as _negation
from .merge import merge_axes
from .reach import normalised, read_by_scores
from .rename import store_renamed
from .values import through  # noqa: F401 (read from here by most passes)
from .written import is_op as _is, logsumexp as _logsumexp, replace as _replace, \
    softmax as _softmax, variance as _variance


def canonicalize(g: DiGraph, keep=(), free: bool = False, nest: bool = True,
                 grouped=()) -> DiGraph:
    """Rewrite the IR into canonical form (a copy); `keep`: axes hinted on the command line
    (never merged); `free`: free axes merged too, else only axes an op names (merge.py);
    `nest=False`: contractions over three or more axes are left whole, and the factors of
    one local_merge.py merges, for it to merge runs of their axes first (`nested_contractions`
    nests what is left); `grouped`: the axes of `keep` a `group` hint names (never moved)."""
    g = g.copy()
    changed = True
    while changed:
        changed = False
        for n in ir.order(g):
            if n in g and (_summed_product(g, n) or _softmax(g, n) or _variance(g, n) or
                           _logsumexp(g, n) or _constant_last(g, n) or _abs_bound(g, n) or
                           _additive_form(g, n) or
                           (nest or not chains_of(g, n, keep)) and _hoisted(g, n)):
                changed = True
                break
    store_renamed(g, grouped)
    g = merge_axes(dead_code(g), keep, free)    # before nesting: merged axes nest no more
    for n in ir.order(g):       # after the rewrites above matched softmaxes whole
        _written_softmax(g, n)
    for n in ir.order(g):       # after the rewrites above matched their reductions whole
        if n in g:
            _nested_reduction(g, n)
        if n in g and nest:
            _nested_contraction(g, n)
    return dead_code(g)


def nested_contractions(g: DiGraph) -> DiGraph:
    """The IR with each contraction over three or more axes nested as canonicalize nests
    them, and each over two that local_merge.py merged from more (`contract[g (h*d)]` was
    over three, and nests as `sum[g](contract[(h*d)])`, the inner product on the tensor
    cores); `local_merged` then names the inner product. A copy, or g itself where nothing
    nests."""
    merged = {c for c, _, _ in g.graph.get("local_merged", ())}
    least = {n: 2 if n in merged else 3 for n in ir.order(g) if _is(g, n, ir.Contract)}
    if all(len(ir.op(g, n).axes) < k for n, k in least.items()):
        return g
    g = g.copy()
    inner = {n: _nested_contraction(g, n, k) for n, k in least.items()}
    g.graph["local_merged"] = tuple((inner[c] or c, a, ch)
                                    for c, a, ch in g.graph.get("local_merged", ()))
    return dead_code(g)


def softmaxes(g: DiGraph) -> DiGraph:
    """The IR with written-out softmaxes as `softmax` and a scale written on a factor of
    attention's scores after their product (`0.125 * Q * K` as `Q * K * 0.125`: _hoisted),
    nothing else rewritten (a copy): what reverse mode differentiates (compiler/grad.py), so
    that attention written out has FlashAttention's gradient, not one through the row maximum
    (zero, but computed), nor one contracting the cotangent with a scaled Q (not loaded: its
    products stored the scores, 6 kernels)."""
    g = g.copy()
    while any(n in g and (_softmax(g, n) or _hoisted(g, n, scores_only=True))
              for n in ir.order(g)):
        pass
    return dead_code(g)


def dead_code(g: DiGraph) -> DiGraph:
    """Drop nodes no output depends on (inputs stay: they are the signature)."""
    live = set(g.graph["inputs"].values())
    for n in g.graph["outputs"].values():
        live |= ancestors(g, n) | {n}
    g.remove_nodes_from([n for n in list(g) if n not in live])
    g.graph["arrays"] = {k: v for k, v in g.graph["arrays"].items() if v in g}
    return g


NESTABLE = ("sum", "max", "min", "mean", "logsumexp")   # f[A B] = f[A](f[B]) for these


def _nested_reduction(g: DiGraph, n: int) -> None:
    """f[K](e) with three or more axes in K becomes f[K - inner](f[inner](e)), `inner` the
    last two axes of K in e's layout (the outer reduction nested again while it has three)."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Reduce) or op.fn not in NESTABLE or len(op.axes) < 3:
        return
    (arg,) = ir.operands(g, n)
    layout = ir.type_of(g, arg).axes
    inner = tuple(a for a in layout if a in op.axes)[-2:]
    span, stmt = g.nodes[n]["span"], g.nodes[n]["stmt"]
    part = ir.add_node(g, ir.Reduce(op.fn, inner), ir.ArrayType(
        tuple(a for a in layout if a not in inner), ir.INTERMEDIATE), [arg], span=span, stmt=stmt)
    outer = tuple(a for a in op.axes if a not in inner)
    new = ir.add_node(g, ir.Reduce(op.fn, outer), ir.type_of(g, n), [part], span=span, stmt=stmt)
    _replace(g, n, new)
    _nested_reduction(g, new)


def _nested_contraction(g: DiGraph, n: int, least: int = 3) -> int | None:
    """contract[K](A, B) with three or more axes in K becomes sum[K - k](contract[k](A, B)),
    `k` the last axis of K in A's layout: the inner product is a matrix product over one axis
    batched over the others, as the tensor cores take it, and the outer sum nests. (Keeping
    the last two axes inside makes a smaller intermediate but a CUDA-core product: 127 us
    against 74.6 us for `A[i a b c] * B[a b c j]` at 64 per axis on h100, 4.99 ms against
    1.07 ms at 128, model figures.) A contraction with a softmax operand (over one or two
    axes) keeps its axes: attention's online softmax pairs the two."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Contract) or len(op.axes) < least:
        return None
    args = ir.operands(g, n)
    if any(isinstance(ir.op(g, through(g, a)), ir.Softmax) for a in args):
        return None
    layout = ir.type_of(g, args[0]).axes
    inner = tuple(a for a in layout if a in op.axes)[-1:]
    outer = tuple(a for a in op.axes if a not in inner)
    out = ir.type_of(g, n)
    span, stmt = g.nodes[n]["span"], g.nodes[n]["stmt"]
    # the partial products' axes: the outer contracted ones (in A's layout), then the output's
    part = ir.add_node(g, ir.Contract(inner), ir.ArrayType(
        tuple(a for a in layout if a in outer) + out.axes,
        ir.dtype_of_kind(ir.kind_of_dtype(out.dtype))), list(args), span=span, stmt=stmt)
    new = ir.add_node(g, ir.Reduce("sum", outer), out, [part], span=span, stmt=stmt)
    _replace(g, n, new)
    _nested_reduction(g, new)
    return part


def _written_softmax(g: DiGraph, n: int) -> None:
    """softmax[K](S) with three or more axes in K becomes
    `where(l == 0, 0, E / l)`, `E = exp(S - where(m == -inf, 0, m))`, `m = max[K](S)`,
    `l = sum[K](E)`: the reference's meaning (elementwise.softmax), in reductions that nest;
    a softmax recognised from its written form (`written`) keeps `E / l`, NaN (0 / 0) where
    the row is fully masked."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Softmax) or len(op.axes) < 3:
        return
    (s,) = ir.operands(g, n)
    layout = ir.type_of(g, s).axes
    rest = tuple(a for a in layout if a not in op.axes)
    span, stmt = g.nodes[n]["span"], g.nodes[n]["stmt"]

    def add(o, axes, args, dtype=ir.INTERMEDIATE):
        return ir.add_node(g, o, ir.ArrayType(axes, dtype), args, span=span, stmt=stmt)

    def const(value):
        return add(ir.Const(value), (), [])

    def zero_where(x, value, axes, otherwise):      # where(x == value, 0, otherwise)
        test = add(ir.Map("eq"), rest, [x, const(value)], "bool")
        return add(ir.Map("where"), axes, [test, const(0.0), otherwise])

    m = add(ir.Reduce("max", op.axes), rest, [s],
            ir.dtype_of_kind(ir.kind_of_dtype(ir.type_of(g, s).dtype)))
    shift = zero_where(m, float("-inf"), rest, m)
    e = add(ir.Map("exp"), layout, [add(ir.Map("sub"), layout, [s, shift])])
    total = add(ir.Reduce("sum", op.axes), rest, [e])
    new = add(ir.Map("div"), layout, [e, total])
    if not op.written:
        new = zero_where(total, 0.0, layout, new)
    assert ir.type_of(g, n).axes == layout
    _replace(g, n, new)




def _constant_last(g: DiGraph, n: int) -> bool:
    """where(not c, a, b) becomes where(c, b, a), and where(c, k, e) with k a constant and e
    not becomes where(c', e, k), c' the negation of c where it has one without `not`
    (_negation): a mask reads `where(cond, S, -inf)` however it was written (`where(x > q,
    -inf, S)`), and chunks outside it are skipped (masking.py)."""
    if not _is(g, n, ir.Map, "where"):
        return False
    c, a, b = ir.operands(g, n)
    at = dict(span=g.nodes[n]["span"], stmt=g.nodes[n]["stmt"])
    if _is(g, through(g, c), ir.Map, "not"):
        args = [ir.operands(g, through(g, c))[0], b, a]
    elif constant(g, through(g, a)) is not None and constant(g, through(g, b)) is None:
        neg = _negation(g, c, at)
        if neg is None:
            return False
        args = [neg, b, a]
    else:
        return False
    _replace(g, n, ir.add_node(g, ir.Map("where"), ir.type_of(g, n), args, **at))
    return True


def _abs_bound(g: DiGraph, n: int) -> bool:
    """`abs(a) < b` of integers becomes `a < b and -a < b` (`<=`, and `b > abs(a)`, alike):
    a window both ways (`abs(q - x) < 128`) reads as the comparisons chunk skipping tests
    (masking.py)."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Map) or op.fn not in _NEGATED:
        return False
    a, b = ir.operands(g, n)
    fn = op.fn
    if op.fn in ("gt", "ge"):           # b > abs(a) is abs(a) < b
        a, b, fn = b, a, {"gt": "lt", "ge": "le"}[op.fn]
    if not _is(g, through(g, a), ir.Map, "abs") or fn not in ("lt", "le"):
        return False
    (e,) = ir.operands(g, through(g, a))
    if any(ir.kind_of_dtype(ir.type_of(g, u).dtype) != "int" for u in (e, b)):
        return False
    at = dict(span=g.nodes[n]["span"], stmt=g.nodes[n]["stmt"])
    neg = ir.add_node(g, ir.Map("neg"), ir.type_of(g, e), [e], **at)
    parts = [ir.add_node(g, ir.Map(fn), ir.type_of(g, n), [u, b], **at) for u in (e, neg)]
    _replace(g, n, ir.add_node(g, ir.Map("and"), ir.type_of(g, n), parts, **at))
    return True


def _factors(g: DiGraph, n: int, inverse: bool = False) -> list[tuple[int, bool]]:
    """The factors of a product, each with whether it divides (through names, products and
    quotients of floats: `X / sqrt(v) * g` is X, sqrt(v) dividing, g; a name with a
    declared storage dtype, or anything else, is one factor)."""
    m = n
    while isinstance(ir.op(g, m), ir.Assign) and ir.op(g, m).dtype is None and \
            ir.type_of(g, m).axes == ir.type_of(g, ir.operands(g, m)[0]).axes:
        m = ir.operands(g, m)[0]
    if ir.kind_of_dtype(ir.type_of(g, m).dtype) == "float" and \
            (_is(g, m, ir.Map, "mul") or _is(g, m, ir.Map, "div")):
        a, b = ir.operands(g, m)
        return _factors(g, a, inverse) + _factors(g, b, inverse != _is(g, m, ir.Map, "div"))
    return [(m, inverse)]


def _own_view(g: DiGraph, f: int, span, stmt) -> int:
    """f, or where it is another statement's view of an input (factors are found through
    names), a view of `stmt`'s own: no kernel is left storing a view of an input."""
    u = ir.operands(g, f)[0] if isinstance(ir.op(g, f), ir.View) else None
    if g.nodes[f]["stmt"] == stmt or u is None or not isinstance(ir.op(g, u), ir.Input):
        return f
    return ir.add_node(g, ir.op(g, f), ir.type_of(g, f), [u], span=span, stmt=stmt)


def _within(t: ir.ArrayType, axes: set) -> ir.ArrayType:
    """t restricted to `axes` (in t's order)."""
    return ir.ArrayType(tuple(a for a in t.axes if a in axes), t.dtype)


def _hoisted(g: DiGraph, n: int, scores_only: bool = False) -> bool:
    """contract[K](A, B) where A (or B) is a product with factors that lack every axis of K
    becomes contract[K](the other factors, B) times those factors (divided by those that
    divide: `X / sqrt(v)`; the first kept factor multiplies); `scores_only`: attention's
    scores only (reach.normalised)."""
    if not _is(g, n, ir.Contract):
        return False
    scores = normalised(g, n)
    if scores_only and not scores:
        return False
    op, out = ir.op(g, n), ir.type_of(g, n)
    span, stmt = g.nodes[n]["span"], g.nodes[n]["stmt"]
    args = ir.operands(g, n)
    batch = set.intersection(*(set(ir.type_of(g, u).axes) for u in args)) - set(op.axes)
    for i, arg in enumerate(args):
        if not scores and read_by_scores(g, arg):
            continue    # the scores' loaded operand (QK-norm's Qn): the backward's chains
                        # load it as they are too, no operand computed beside it
        factors = _factors(g, arg)
        # (a scalar stays inside: the backward's `dS / sqrt(size(d))` or `dS * 0.125` feeds
        # dQ and dK, and taken out of both it parted the chain that computes them together;
        # but one constant over each score tile leaves attention's scores, `0.125 * Q * K` or
        # a head's `Q * g[h] * K`, whose Q and K FlashAttention loads as they are and scales
        # its scores, where a row's factor stays: QK-norm's rsqrt)
        kept = [(f, d) for f, d in factors if not set(ir.type_of(g, f).axes) <= batch] \
            if scores else [(f, d) for f, d in factors
                            if set(ir.type_of(g, f).axes) & set(op.axes)
                            or not ir.type_of(g, f).axes]
        left = [(f, d) for f, d in factors if (f, d) not in kept]
        if not left or not kept or kept[0][1] or not all(
                set(ir.type_of(g, f).axes) <= set(out.axes) for f, _ in left):
            continue
        axes = ir.type_of(g, arg).axes
        kept, left = ([(_own_view(g, f, span, stmt), d) for f, d in fs] for fs in (kept, left))
        product = kept[0][0]
        for f, d in kept[1:]:       # the kept factors' product, over their axes (arg's order)
            have = set(ir.type_of(g, product).axes) | set(ir.type_of(g, f).axes)
            product = ir.add_node(g, ir.Map("div" if d else "mul"), ir.ArrayType(
                tuple(a for a in axes if a in have), ir.INTERMEDIATE), [product, f],
                span=span, stmt=stmt)
        new_args = list(args)
        new_args[i] = product
        # the sum keeps the output axes its operands still have (a factor taken out may be
        # the only one with some: `sum[l](E0[i] * l)` is `sum[l](l) * E0[i]`)
        have = {a for m in new_args for a in ir.type_of(g, m).axes}
        result = ir.add_node(g, op, _within(out, have), new_args, span=span, stmt=stmt)
        for f, d in left:
            have |= set(ir.type_of(g, f).axes)
            result = ir.add_node(g, ir.Map("div" if d else "mul"), _within(out, have),
                                 [result, f], span=span, stmt=stmt)
        _replace(g, n, result)
        return True
    return False


def _summed_product(g: DiGraph, n: int) -> bool:
    """sum[K](A * B) becomes contract[K](A, B) where A and B are two different arrays
    multiplied (floats), both with every axis of K and each with an axis of its own (the
    einsum spelled out: loaded, or computed as the einsum rule's `gelu(A * B) * D` and
    attention's `sum[x](softmax[x](S) * V)`); the product stays where something else reads
    it."""
    if not _is(g, n, ir.Reduce, "sum"):
        return False
    (p,) = ir.operands(g, n)
    if not _is(g, p, ir.Map, "mul") or ir.kind_of_dtype(ir.type_of(g, p).dtype) != "float":
        return False
    args = ir.operands(g, p)
    axes = set(ir.op(g, n).axes)
    if len(args) != 2 or args[0] == args[1]:
        return False
    a, b = (set(ir.type_of(g, m).axes) for m in args)
    # a matrix product: K in both, and each operand an axis of its own (a row-wise dot
    # product such as the backward's D = sum[d](dO * O) stays the reduction its lowerings
    # expect, and so does a masked sum matched as a scatter)
    if not axes <= a & b or not a - b - axes or not b - a - axes:
        return False
    result = ir.add_node(g, ir.Contract(ir.op(g, n).axes), ir.type_of(g, n), list(args),
                         span=g.nodes[n]["span"], stmt=g.nodes[n]["stmt"])
    _replace(g, n, result)
    return True
