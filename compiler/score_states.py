"""One running state for the row statistics of one set of scores on the CUDA cores: a
logsumexp of the scores an attention's softmax normalises, and a row sum or maximum of its
probabilities (row_state.of_probabilities), each keep a running max m and sum l of exp of
those scores (codegen/accum.py's logsumexp state); streamed in one pass over the same rows
they share the first one's (`shared`) and finish from it: m + log l, l / l, 1 / l. An f32
attention with L = logsumexp[x](S), sum[x](P) and max[x](P) beside it kept three such
states, each its own exponential per score. FlashAttention reads all of them from its own
state (row_state.py)."""

from __future__ import annotations

from . import ir, row_state
from .values import same_values


def shared(g, st) -> dict[int, int]:
    """{reducer: the reducer whose running state it reads}: logsumexps of the same scores as
    a paired softmax's, and row sums and maxima of its probabilities, folded in the same
    pass over the same rows; the first of each set keeps the state (and maps to itself)."""
    out: dict[int, int] = {}
    keepers: list[tuple[int, int, int]] = []      # (reducer, its pass, its scores)
    for n, p in st.reducers:
        scores = _scores(g, st, n)
        if scores is None:
            continue
        keeper = next((k for k, q, s in keepers if q == p and same_values(g, s, scores)
                       and ir.type_of(g, k).axes == ir.type_of(g, n).axes), None)
        if keeper is None:
            keepers.append((n, p, scores))
        out[n] = n if keeper is None else keeper
    return out


def _scores(g, st, n: int) -> int | None:
    """The scores whose running max and sum of exp reducer n keeps, or None."""
    found = row_state.of_probabilities(g, st, n)
    if found is not None:
        return ir.operands(g, found[0])[0]
    op = ir.op(g, n)
    if isinstance(op, ir.Reduce) and op.fn == "logsumexp" and op.axes == (st.axis,) and \
            len(st.pairs) == 1 and row_state.statistic(
                g, n, ir.operands(g, st.pairs[0][0])[0], (st.axis,)) == "logsumexp":
        return ir.operands(g, n)[0]
    return None
