"""An online softmax's final state as outputs: the row statistics of the scores an attention
normalises that its running maximum m and running sum l (of exp(S - m)) already hold.

    logsumexp[x](S)   m + log l        (a gradient's saved statistic, a split's partial state)
    max[x](S)         m
    sum[x](exp(S))    l exp(m)
    sum[x](P)         l / l        P = softmax[x](S): 1, or a fully masked row's probability
    max[x](P)         1 / l        (exp(m - m) / l): ir.empty_row's 0 or NaN where l is 0

S spelt again (values.same_values: the gradient's `logsumexp[s](where(s <= t, S, -inf))`
beside the forward's softmax of the same masked scores), the scale as written (`Q * K /
sqrt(size(d))`: the kernel keeps m unscaled and multiplies it by the scale). FlashAttention
stores them from its state after the last chunk (codegen/flash.py), with no reduction of its
own; statistics of scores no softmax normalises (`logsumexp[x](Q * K / 4)` alone, no P V:
`alone`) are the same kernel without its second product, their state the same m and l; fusion starts the attention with their statements (fuse._attention_sites); the models
charge no op per score for them nor for the ops only they read (`state_ops`: issue.py,
occupancy.py). A statistic of other values (another mask, the unscaled product) is a
reduction of its own.
"""

from __future__ import annotations

from . import ir
from .graph import ancestors
from .values import same_values, through

KINDS = ("logsumexp", "max", "sumexp", "psum", "pmax")
SHOWN = {"logsumexp": "m + log l", "max": "m", "sumexp": "l exp(m)",      # (explain)
         "psum": "l / l", "pmax": "1 / l"}
OF_PROBABILITIES = {"sum": "psum", "max": "pmax"}    # statistics of P itself


def statistic(g, n: int, scores: int, axes: tuple[str, ...], soft: int | None = None) \
        -> str | None:
    """The kind (KINDS) of row statistic over the softmax's `axes` that reduction n takes of
    its argument `scores` (or, `soft` given, of that softmax's probabilities), or None when
    it is none."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Reduce) or op.axes != tuple(axes):
        return None
    (arg,) = ir.operands(g, n)
    if soft is not None and through(g, arg) == soft:
        return OF_PROBABILITIES.get(op.fn)
    if op.fn in ("logsumexp", "max"):
        return op.fn if same_values(g, arg, scores) else None
    inner = through(g, arg)
    if op.fn == "sum" and ir.op(g, inner) == ir.Map("exp") and \
            same_values(g, ir.operands(g, inner)[0], scores):
        return "sumexp"
    return None


def row_statistics(g, st) -> tuple[int, ...]:
    """The streamed reducers that are row statistics (`statistic`) of the scores the kernel's
    one online softmax normalises."""
    if len(st.pairs) != 1:
        return ()
    soft, out = st.pairs[0]
    scores = ir.operands(g, soft)[0]
    return tuple(n for n, _ in st.reducers
                 if n != out and statistic(g, n, scores, (st.axis,), soft) is not None)


def of_probabilities(g, st, n: int) -> tuple[int, str] | None:
    """(the paired softmax, the kind: psum or pmax) where reduction n is a row sum or maximum
    of the probabilities of one of the kernel's paired softmaxes (passes.softmax_pairs keeps
    the pair), else None. The CUDA cores keep a running max and sum of its scores for it
    (codegen/accum.py), FlashAttention reads its own state."""
    for soft, _ in st.pairs:
        kind = statistic(g, n, ir.operands(g, soft)[0], (st.axis,), soft)
        if kind in OF_PROBABILITIES.values():
            return soft, kind
    return None


def alone(g, st) -> tuple[int, tuple[int, ...]] | None:
    """(S, the statistics) where every reduction the kernel streams over its axis is a row
    statistic (logsumexp, max, sum of exp) of one array of scores S that no softmax
    normalises: FlashAttention's state with no P V (its m and l hold them all), the scores'
    own product over another axis (flash.examine checks it); else None."""
    if st.axis is None or st.pairs or st.stats or st.passes != 1 or not st.reducers:
        return None
    nodes = [n for n, _ in st.reducers]
    op = ir.op(g, nodes[0])
    if not isinstance(op, ir.Reduce) or op.axes != (st.axis,):
        return None
    (arg,) = ir.operands(g, nodes[0])
    inner = through(g, arg)
    scores = ir.operands(g, inner)[0] if op.fn == "sum" and ir.op(g, inner) == ir.Map("exp") \
        else arg
    if any(statistic(g, n, scores, (st.axis,)) is None for n in nodes):
        return None
    return scores, tuple(nodes)


def scores_of(g, st) -> int:
    """The scores whose row statistics the kernel's state holds: its one paired softmax's
    argument, or the statistics' own (`alone`)."""
    if st.pairs:
        return ir.operands(g, st.pairs[0][0])[0]
    return alone(g, st)[0]


def kinds(g, st, stats) -> tuple[str, ...]:
    """The kind of each of `stats` (row_statistics, or alone's), in order."""
    soft = st.pairs[0][0] if st.pairs else None
    return tuple(statistic(g, n, scores_of(g, st), (st.axis,), soft) for n in stats)


def state_ops(g, st, stats) -> frozenset:
    """The statistics `stats` (row_statistics, or alone's) and the ops only they read that spell the
    softmax's argument again (or take its exponential): the attention kernel computes none of
    them (they are the softmax's state), so the models charge none."""
    if not stats:
        return frozenset()
    arg = scores_of(g, st)
    shared = ancestors(g, arg) | {arg}
    found = set().union(*({u} | ancestors(g, u) for n in stats for u in ir.operands(g, n))) - \
        shared
    out = set(stats) | found
    while True:       # (an op something else reads too is computed for it)
        read = {n for n in found if n in out and any(v not in out for v in g.successors(n))}
        if not read:
            return frozenset(out)
        out -= read
