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
CELLS = 1 << 21          # (block, position) pairs a count by position looks at, at most
_CMP = ("lt", "le", "gt", "ge", "eq")


def chunk_mask(g, st, loads=(), nodes=()) -> tuple | None:
    """The condition under which a chunk is computed (an expression of tuples), or None when
    the kernel never skips one. `loads`: the kernel's loads (a data leaf is an input the
    kernel itself reads)."""
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


def condition_nodes(g, st, loads=(), nodes=()) -> frozenset:
    """The ops computing an attention's mask condition (paired_condition and what it is made
    of, down to indices, sizes and constants)."""
    cond = paired_condition(g, st)
    if cond is None or _expr(g, cond, data=(st.axis, frozenset(loads), frozenset(nodes))) is None:
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
DATA_DTYPES = ("i32", "i64", "bool")


class PlanningData:
    """An integer or boolean input's values given for planning (`napkin explain --data`): the
    model counts the chunks its mask skips on them. Hashes by content, so plans and the
    fraction cache key on it."""

    def __init__(self, name: str, values):
        import hashlib
        self.name = name
        self.values = np.ascontiguousarray(values, dtype=np.int64)
        self.values.setflags(write=False)
        digest = hashlib.sha1(repr(self.values.shape).encode() + self.values.tobytes())
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
    if not isinstance(op, ir.Map) or op.fn not in ("neg", "add", "sub", "mul", "and", "or") + _CMP:
        return None
    args = [_expr(g, m, data) for m in ir.operands(g, n)]
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
    if kind == "data":
        return f"{expr[1]}[{' '.join(expr[2])}]", False
    parts = [describe(e) for e in expr[1:]]
    left = any(lo for _, lo in parts)
    shown = [t for t, _ in parts if t]
    if kind == "and" and len(shown) == 1:
        return shown[0], left
    inner = f" {_SHOWN[kind]} ".join(f"({t})" if kind in ("and", "or") and " " in t else t
                                     for t in shown)
    return inner, left


def data_inputs(expr) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(inputs the mask reads with values given for planning, those without), by name."""
    leaves = _leaves(expr) if expr is not None else ()
    given = tuple(dict.fromkeys(lf[1] for lf in leaves if lf[3] is not None))
    return given, tuple(dict.fromkeys(lf[1] for lf in leaves if lf[3] is None
                                      and lf[1] not in given))


def axes_of(expr) -> tuple[str, ...]:
    """The axes whose index the expression reads, in a fixed order."""
    if expr[0] == "cut":
        return axes_of(expr[1])
    if expr[0] == "index":
        return (expr[1],)
    if expr[0] == "data":
        return tuple(sorted(set(expr[2])))
    if expr[0] in ("size", "const", "unknown"):
        return ()
    return tuple(sorted({a for e in expr[1:] for a in axes_of(e)}))


def computed_fraction(mask, sizes: dict, tiles: dict, what: str = "computed"):
    """The share of (block, chunk) pairs computed, per candidate: `tiles` gives each masked
    axis's extent per block (a grouped axis's tile, the streamed axis's chunk; a number or
    an array broadcasting to the candidates), an axis not in it is whole. 1.0 without a
    mask. `what="iterated"`: the share the chunk loop visits (the span of a mask read from
    data, codegen/masks.data_span; every chunk otherwise)."""
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
    found = np.array([_fraction(mask, size_key, tuple(zip(axes, map(int, t))), what)
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


def iterated_fraction(mask, sizes: dict, tiles: dict):
    """The share of (block, chunk) pairs the chunk loop visits (computed_fraction's)."""
    return computed_fraction(mask, sizes, tiles, "iterated")


def spans(mask) -> bool:
    """Whether the kernel of this mask bounds its chunk loop by data (codegen/masks.data_span
    emits its prologue where a leaf of the mask is an integer or boolean input)."""
    return mask is not None and bool(_leaves(mask))


def along_bytes(mask) -> int:
    """Bytes per position of the inputs a bounded loop's prologue reads along the streamed
    axis (codegen/masks.data_span reads each once per position and block, from L2)."""
    leaves = _leaves(mask) if mask is not None else ()
    return 4 * len({(lf[1], lf[2]) for lf in leaves if lf[4] in lf[2]})


@functools.lru_cache(maxsize=4096)
def _fraction(mask, size_key: tuple, extents: tuple, what: str = "computed") -> float:
    sizes, ext = dict(size_key), {a: max(int(e), 1) for a, e in extents}
    leaves = _leaves(mask)
    # with values for a leaf read along the streamed axis, the kernel tests the chunk's
    # positions one by one (codegen/masks.py): so does the count, position by position
    stream = next((lf[4] for lf in leaves if lf[3] is not None and lf[4] in lf[2]
                   and lf[4] in ext), None)
    counts = {a: -(-sizes[a] // e) for a, e in ext.items()}
    limit = {a: SAMPLES for a in ext}
    while stream and np.prod([min(counts[a], limit[a]) for a in ext]) * ext[stream] > CELLS:
        widest = max(ext, key=lambda a: min(counts[a], limit[a]))
        limit[widest] = max(1, min(counts[widest], limit[widest]) // 2)
    ranges = {}
    for a, e in ext.items():
        tiles = np.arange(0, sizes[a], e)
        if len(tiles) > limit[a]:
            tiles = tiles[np.linspace(0, len(tiles) - 1, limit[a]).astype(int)]
        ranges[a] = tiles
    order = [a for a in ext if a != stream] + ([stream] if stream else [])   # chunks last
    dims = [len(ranges[a]) for a in order] + ([ext[stream]] if stream else [])
    grids = np.meshgrid(*[np.arange(d) for d in dims], indexing="ij", sparse=True) \
        if dims else []
    box, tile_of, valid = {}, {}, True
    for i, a in enumerate(order):
        start = ranges[a][grids[i]].astype(float)
        tile_of[a] = (start // ext[a]).astype(int)
        if a == stream:
            point = start + grids[-1]
            valid = point < sizes[a]
            box[a] = (point, point)
        else:
            box[a] = (start, np.minimum(start + ext[a], sizes[a]) - 1)
    for lf in leaves:
        box[lf] = _leaf_interval(lf, box, ext, tile_of, stream)
    shape = tuple(dims)
    if mask[0] == "cut":       # computed, and not held everywhere
        held, fails = _holds(mask[1], box, sizes), _fails(mask[1], box, sizes)
    else:
        held, fails = _holds(mask, box, sizes), True
    held = np.broadcast_to(held, shape) & np.broadcast_to(valid, shape)
    fails = np.broadcast_to(fails, shape) & np.broadcast_to(valid, shape)
    if what == "iterated" and not stream:
        return 1.0
    if stream:
        # the block runs the chunks from the first to the last holding a position where the
        # mask may hold (codegen/masks.data_span), each still tested as a whole without the
        # inputs read along the axis (causal's `x <= q` inside a document)
        some = held.any(axis=-1)
        index = np.arange(some.shape[-1])
        first = np.where(some, index, some.shape[-1]).min(axis=-1, keepdims=True)
        last = np.where(some, index, -1).max(axis=-1, keepdims=True)
        chunk = dict(box)
        chunk[stream] = (box[stream][0] - grids[-1],
                         np.minimum(box[stream][0] - grids[-1] + ext[stream], sizes[stream]) - 1)
        for lf in leaves:
            if stream in lf[2]:
                chunk[lf] = (-math.inf, math.inf)
        whole = np.broadcast_to(_holds(mask[1] if mask[0] == "cut" else mask, chunk, sizes),
                                shape)[..., 0]
        if what == "iterated":
            return float(np.mean((index >= first) & (index <= last)))
        held = (index >= first) & (index <= last) & whole
        # a whole chunk inside the block's run of positions where the mask holds for every
        # row needs no mask per score (masks.data_span's `run`); any other computed one does
        must = ~fails & np.broadcast_to(valid, shape)
        point = np.broadcast_to(box[stream][0], shape)
        mfirst = np.where(must, point, np.inf).min(axis=(-2, -1), keepdims=True)[..., 0]
        mlast = np.where(must, point, -1).max(axis=(-2, -1), keepdims=True)[..., 0]
        run = must.sum(axis=(-2, -1), keepdims=True)[..., 0] == mlast - mfirst + 1
        start = np.broadcast_to(box[stream][0] - grids[-1], shape)[..., 0]
        inside = run & (start >= mfirst) & (start + ext[stream] - 1 <= mlast) & \
            (start + ext[stream] <= sizes[stream])
        fails = ~inside
    if mask[0] == "cut":
        held = held & fails
    return float(np.mean(held)) if grids else 1.0


def _leaves(e) -> tuple:
    """The data leaves of a mask expression (with their values, or None), in order."""
    if not isinstance(e, tuple) or not e:
        return ()
    if e[0] == "data":
        return (e,)
    return tuple(dict.fromkeys(lf for x in e[1:] for lf in _leaves(x)))


def _leaf_interval(leaf, box: dict, ext: dict, tile_of: dict, stream):
    """(lo, hi) of a data leaf over each box of the grid, from its values: along the streamed
    axis at each position (its other axes one position each in the block, else unknown),
    else the least and greatest value over the block's ranges (the kernel's prologue)."""
    _, _, labels, ref, _ = leaf
    unknown = (-math.inf, math.inf)
    if ref is None or len(labels) != ref.values.ndim:
        return unknown
    values = ref.values
    if stream is not None and stream in labels:
        if any(ext.get(a, 1) > 1 for a in labels if a != stream):
            return unknown
        index = tuple(np.clip(box[a][0].astype(int), 0, values.shape[j] - 1)
                      for j, a in enumerate(labels))
        v = values[index].astype(float)
        return v, v
    lo = hi = values
    for j, a in enumerate(labels):
        starts = np.arange(0, values.shape[j], ext.get(a, values.shape[j]))
        lo = np.minimum.reduceat(lo, starts, axis=j)
        hi = np.maximum.reduceat(hi, starts, axis=j)
    index = tuple(np.clip(tile_of[a], 0, lo.shape[j] - 1) for j, a in enumerate(labels))
    return lo[index].astype(float), hi[index].astype(float)


def _interval(e, box: dict, sizes: dict):
    kind = e[0]
    if kind == "index":
        return box[e[1]]
    if kind == "data":
        return box[e]
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
    with np.errstate(invalid="ignore"):
        ends = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])    # mul by a constant
    return np.minimum.reduce(ends), np.maximum.reduce(ends)


def _holds(e, box: dict, sizes: dict):
    """Whether condition e can hold somewhere in the box (per box of the grid)."""
    kind = e[0]
    if kind in ("and", "or"):
        a, b = _holds(e[1], box, sizes), _holds(e[2], box, sizes)
        return (a & b) if kind == "and" else (a | b)
    if kind == "data":                 # a boolean input as the condition: true somewhere
        return box[e][1] > 0
    if kind not in _CMP:
        return True
    a, b = _interval(e[1], box, sizes), _interval(e[2], box, sizes)
    return {"lt": lambda: a[0] < b[1], "le": lambda: a[0] <= b[1], "gt": lambda: a[1] > b[0],
            "ge": lambda: a[1] >= b[0], "eq": lambda: (a[0] <= b[1]) & (b[0] <= a[1])}[kind]()


def _fails(e, box: dict, sizes: dict):
    """Whether condition e can fail somewhere in the box (per box of the grid); a part read
    from data by the intervals of its values (unknown ones: anywhere)."""
    kind = e[0]
    if kind in ("and", "or"):
        a, b = _fails(e[1], box, sizes), _fails(e[2], box, sizes)
        return (a | b) if kind == "and" else (a & b)
    if kind == "data":                 # a boolean input as the condition: false somewhere
        return box[e][0] <= 0
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
