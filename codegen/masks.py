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
from typing import NamedTuple

from ..compiler import ir, row_state
from ..compiler.masking import data_leaf, masked_by, product_mask, through_names
from . import program as P
from .intervals import can_hold, must_hold

IDENTITY = {"max": -math.inf, "logsumexp": -math.inf, "stats": -math.inf, "pair": -math.inf,
            "alone": -math.inf,
            "sum": 0.0, "contract": 0.0, "psum": -math.inf, "pmax": -math.inf}


def conditions(g, lw, reducers, kinds: dict) -> list | None:
    """The condition node outside of which each reducer of the pass folds nothing, or None
    when one has none (its chunks are never skipped)."""
    conds = []
    for n in reducers:
        kind = kinds[n]
        if kind == "pair":
            arg = ir.operands(g, lw.paired_softmax(n))[0]
        elif kind in ("max", "logsumexp", "sum", "stats"):
            arg = ir.operands(g, n)[0]
        elif kind == "alone":            # row statistics of scores alone: their scores
            arg = row_state.scores_of(g, lw.st)
        elif kind in ("psum", "pmax"):   # (a running max and sum of the softmax's scores)
            arg = ir.operands(g, row_state.of_probabilities(g, lw.st, n)[0])[0]
        elif kind == "contract":         # a product one of whose operands the mask zeroes
            arg = None
        else:
            return None
        cond = product_mask(g, n) if arg is None else masked_by(g, arg, IDENTITY[kind])
        if cond is None:
            return None
        conds.append(cond)
    return conds or None


def skip_test(lw, reducers, kinds: dict, box: dict) -> str | None:
    """C expression: true when the current chunk is masked for every reducer of the pass."""
    return _hidden(lw.g, conditions(lw.g, lw, reducers, kinds), box)


def _hidden(g, conds, box: dict) -> str | None:
    """C expression: true when none of the conditions `conds` can hold in `box` (None: one
    of them cannot be tested there, or there are none)."""
    if conds is None:
        return None
    tests = [can_hold(g, c, box) for c in conds]
    if any(t is None for t in tests):
        return None
    return "!(" + " || ".join(tests) + ")"


def _leaves(g, n: int, found: dict) -> None:
    """The data leaves the condition at n compares (masking.data_leaf), by node."""
    n = through_names(g, n)
    leaf = data_leaf(g, n)
    if leaf is not None:
        found[n] = leaf
        return
    if isinstance(ir.op(g, n), ir.Map):
        for m in ir.operands(g, n):
            _leaves(g, m, found)


LEAST, MOST = "(-9223372036854775807LL - 1)", "9223372036854775807LL"


class Span(NamedTuple):
    """A chunk loop bounded by its mask (data_span, index_span): C names of the first chunk's
    start and of the end of the chunks to run; `bounds`: the block's intervals of the inputs
    read over its rows (for the per-chunk test); `run`: (flag, first, last) of the positions
    where every condition holds for every row, or None; `band`: no chunk between first and
    end is hidden (the loop needs no skip test of its own)."""
    first: str
    end: str
    bounds: dict
    run: tuple | None
    band: bool = False


def chunk_span(lw, reducers, kinds: dict, threads: int, r: str, single) -> Span | None:
    """The bounds of the chunk loop along r by the reducers' mask, its prologue emitted: read
    from data (data_span) or of indices (index_span); None when the mask bounds nothing."""
    return data_span(lw, reducers, kinds, threads, r, single) or \
        index_span(lw, reducers, kinds, threads, r)


def _reduction_buffer(lw, threads: int) -> str:
    """Shared memory for napkin_block_range and napkin_block_sum: two values a warp."""
    b = lw.b
    red = b.fresh("sred")
    warps = -(-threads // 32)
    lw.smem.append(P.SharedBuffer(red, "long long", _next(lw), str(2 * warps)))
    lw.smem_terms.append((16 * warps,))
    b.emit(P.Decl("long long* const", red, f"reinterpret_cast<long long*>(smem + "
                                          f"{lw.smem[-1].offset})"))
    return red


def _span_names(b) -> dict:
    """The names of one span prologue's variables (pfirst, plast, mfirst, mlast, mcount,
    mrun, cfirst, cend): plain in a kernel's first, numbered in the next (a kernel of two
    passes over a masked axis, an attention backward's, emits one per pass in one scope)."""
    k = int(b.fresh("span")[len("span"):])
    return {n: f"{n}{k}" if k else n for n in
            ("pfirst", "plast", "mfirst", "mlast", "mcount", "mrun", "cfirst", "cend")}


def _chunk_bounds(lw, size: str, aligned: bool, v: dict) -> None:
    """cfirst and cend from the block's pfirst and plast (the first and the last position
    where the mask may hold, or with `aligned` the first and the last chunk's start;
    plast < 0: nowhere): a chunk-aligned start, an end that is a chunk multiple or the
    axis's size (`v`: the prologue's names, _span_names)."""
    chunk = lw.kp.schedule.stream[1]
    pfirst, plast = v["pfirst"], v["plast"]
    first = pfirst if aligned else f"{pfirst} / {chunk} * {chunk}"
    lw.b.emit(P.Decl(f"const {lw.itype}", v["cfirst"],
                     f"({lw.itype})({plast} < 0 ? 0 : {first})"))
    up = f"{plast} + {chunk}" if aligned else f"({plast} / {chunk} + 1) * {chunk}"
    lw.b.emit(P.Decl(f"const {lw.itype}", v["cend"], f"({lw.itype})({plast} < 0 ? 0 : "
                     f"({up} < {size} ? {up} : {size}))"))


def data_span(lw, reducers, kinds: dict, threads: int, r: str, single):
    """For a mask read from integer inputs (varlen's `doc[q] == doc[x]`, a padding mask's
    `x < len[b]`): emits the block's prologue and returns its Span, else None.

    The prologue takes each input read over the block's rows and batch axes only (doc[q])
    to its least and greatest value over the block; then every thread tests its share of
    the streamed axis's positions, one position at a time (an input read along it, doc[x],
    at its value there), and the block keeps the first and the last position where some
    reducer's condition may hold: `first` (rounded down to a chunk) and `end` bound the
    chunk loop, whose chunks outside never run (FlexAttention's block mask, computed by
    the block itself). `bounds` gives the per-chunk test the block's intervals; `run`,
    (flag, first, last): the positions where every condition holds for every row of the
    block, when they are one run (a chunk inside it needs no mask per score). The model
    counts the chunks the same way (compiler/fractions._fraction)."""
    g = lw.g
    conds = conditions(g, lw, reducers, kinds)
    if conds is None or threads % 32:
        return None
    leaves: dict = {}
    for c in conds:
        _leaves(g, c, leaves)
    # inputs this kernel reads itself (a mask of an array made in an earlier kernel is seen
    # through it, as the model sees it)
    leaves = {n: lf for n, lf in leaves.items() if lf[0] in lw.k.loads
              and (n == lf[0] or n in lw.k.nodes)}
    single = set(single)
    along = {n: lf for n, lf in leaves.items() if r in lf[2] and set(lf[2]) - {r} <= single}
    # read over the block: one position of every axis but at most one (its range in the block)
    rows = {n: lf for n, lf in leaves.items() if r not in lf[2]
            and len(set(lf[2]) - single) <= 1}
    if not along and not rows:
        return None
    b = lw.b
    red = _reduction_buffer(lw, threads)
    block = lw._box(r)
    bounds = {}
    for i, (n, lf) in enumerate(rows.items()):
        lo, hi = b.fresh("dlo"), b.fresh("dhi")     # (dlo0, dhi0, ...: every pass its own)
        b.emit(P.Decl("long long", lo, MOST))
        b.emit(P.Decl("long long", hi, LEAST))
        (row,) = set(lf[2]) - single or {None}

        def fill(n=n, lo=lo, hi=hi, row=row):
            scope = _scope(lw, single, {row: "dt"} if row else {})
            v = b.value("long long", f"(long long)({lw.emitter.value(n, scope)})", "dv")
            b.emit(P.Set(lo, f"napkin_min({lo}, {v})"))
            b.emit(P.Set(hi, f"napkin_max({hi}, {v})"))
        first, top = (block[row][0], f"({block[row][1]}) + 1") if row else ("0", "1")
        b.loop("dt", f"(long long)({first}) + tid", top, str(threads), fill, ctype="long long")
        b.emit(P.Call("napkin_block_range", (lo, hi, red)))
        bounds[n] = (lo, hi)
    size = f"(long long)({lw.sizes[r]})"
    names = _span_names(b)
    b.emit(P.Decl("long long", names["pfirst"], size))   # (none: the axis's size, plast -1)
    b.emit(P.Decl("long long", names["plast"], "-1"))
    # ... and where it holds for every row of the block (every reducer's condition): a
    # chunk inside a run of such positions needs no mask per score (FlashAttention's
    # chunks below the diagonal, here inside one document)
    b.emit(P.Decl("long long", names["mfirst"], size))
    b.emit(P.Decl("long long", names["mlast"], "-1"))
    b.emit(P.Decl("long long", names["mcount"], "0"))

    def test(box):
        tests = [can_hold(g, c, box) for c in conds]
        return None if any(t is None for t in tests) else " || ".join(tests)

    def position():
        # the test without the inputs read along the axis first (causal's `x <= q`): their
        # values are read only where the rest may hold
        here = dict(bounds)
        early = test(dict(lw._box(r, "dp", "1"), **{"#data": here}))

        def full():
            scope = _scope(lw, single, {r: "dp"})
            for n in along:
                v = b.value("long long", f"(long long)({lw.emitter.value(n, scope)})", "dv")
                here[n] = (v, v)
            box = dict(lw._box(r, "dp", "1"), **{"#data": here})
            b.emit(P.If(test(box) or "true",
                        (P.Set(names["pfirst"], f"napkin_min({names['pfirst']}, dp)"),
                         P.Set(names["plast"], f"napkin_max({names['plast']}, dp)"))))
            musts = [must_hold(g, c, box) for c in conds]
            if all(m is not None for m in musts):
                b.emit(P.If(" && ".join(musts),
                            (P.Set(names["mfirst"], f"napkin_min({names['mfirst']}, dp)"),
                             P.Set(names["mlast"], f"napkin_max({names['mlast']}, dp)"),
                             P.Set(names["mcount"], f"{names['mcount']} + 1"))))
        if early is None:
            full()
        else:
            b.emit(P.If(early, lw._scoped(full)))
    b.loop("dp", "(long long)tid", size, str(threads), position, ctype="long long")
    b.emit(P.Call("napkin_block_range", (names["pfirst"], names["plast"], red)))
    b.emit(P.Call("napkin_block_range", (names["mfirst"], names["mlast"], red)))
    # a run only when every position between its first and last is one (no hole)
    b.emit(P.Decl("const bool", names["mrun"],
                  f"napkin_block_sum({names['mcount']}, {red}) == "
                  f"{names['mlast']} - {names['mfirst']} + 1 && {names['mlast']} >= 0"))
    _chunk_bounds(lw, size, aligned=False, v=names)
    return Span(names["cfirst"], names["cend"], bounds,
                (names["mrun"], names["mfirst"], names["mlast"]))


def one_band(g, n: int) -> bool:
    """Whether condition n holds on one band along any axis: a conjunction of comparisons
    (of the affine index expressions interval() reads). Over a block's box the positions
    along an axis where each comparison may hold are one interval, so are the chunks where
    the conjunction may: between a bounded loop's first and last chunk none is hidden."""
    n = through_names(g, n)
    op = ir.op(g, n)
    if not isinstance(op, ir.Map):
        return False
    if op.fn == "and":
        return all(one_band(g, a) for a in ir.operands(g, n))
    return op.fn in ("lt", "le", "gt", "ge", "eq")


def index_span(lw, reducers, kinds: dict, threads: int, r: str):
    """For a mask of indices, sizes and constants (causal's `x <= q`, a window's band): emits
    the block's prologue and returns its Span, else None; `band`: the mask is one band for
    every reducer (one_band), so no chunk between first and end is hidden and the loop
    needs no skip test of its own.

    Every thread tests its share of the chunks along r, the chunk as a whole against the
    block's index ranges (interval arithmetic, as the skip test does), and the block keeps
    the first and the last chunk where some reducer's condition may hold: the chunk loop
    runs from one to the other (its trip count follows the band: a causal block's loop
    ends at its diagonal, a window's starts at its left edge) and still skips a hidden
    chunk between them (a mask of several bands; one band has none). The model counts the
    same chunks (compiler/fractions.iterated_fraction with the streamed axis)."""
    conds = conditions(lw.g, lw, reducers, kinds)
    if threads % 32 or conds is None:
        return None
    chunk = lw.kp.schedule.stream[1]
    size = f"(long long)({lw.sizes[r]})"
    left = f"{size} - dc"
    test = _hidden(lw.g, conds, lw._box(r, "dc", f"({left} < {chunk} ? {left} : {chunk})"))
    if test is None:
        return None
    b = lw.b
    red = _reduction_buffer(lw, threads)
    v = _span_names(b)
    pfirst, plast = v["pfirst"], v["plast"]
    b.emit(P.Decl("long long", pfirst, size))      # (none: the axis's size, and plast -1)
    b.emit(P.Decl("long long", plast, "-1"))
    b.loop("dc", f"(long long)tid * {chunk}", size, f"{threads * chunk}", lambda: b.emit(P.If(
        f"!({test})", (P.Set(pfirst, f"napkin_min({pfirst}, dc)"),
                       P.Set(plast, f"napkin_max({plast}, dc)")))), ctype="long long")
    b.emit(P.Call("napkin_block_range", (pfirst, plast, red)))
    _chunk_bounds(lw, size, aligned=True, v=v)
    band = len({through_names(lw.g, c) for c in conds}) == 1 and one_band(lw.g, conds[0])
    return Span(v["cfirst"], v["cend"], {}, None, band)


def _scope(lw, single, raws: dict) -> dict:
    """The scope of a read in the prologue: the block's position along the `single` axes,
    each raw index clamped inside its axis."""
    from .builder import Ix
    scope = {a: Ix(lw._axis_var("org", a)) for a in single}
    for a, raw in raws.items():
        top = f"({lw.itype})({lw.sizes[a]} - 1)"
        scope[a] = Ix(f"(({lw.itype})({raw}) < {top} ? ({lw.itype})({raw}) : {top})")
    return scope


def _next(lw) -> str:
    from .staging import next_offset
    return next_offset(lw.smem)
