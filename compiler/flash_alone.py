"""Row statistics of attention's scores alone on tensor cores: FlashAttention-2 without P V.

A kernel qualifies when every reduction it streams over `x` is a row statistic of one array
of scores that no softmax normalises (row_state.alone; Model.alone):

    S[batch.. row x] = f(sum over dk of Q[.. row dk] * K[.. x dk])   f elementwise
    L[batch.. row] = logsumexp[x](S)       (or max[x](S), sum[x](exp(S)), several of them)

with Q and K loads of one 16-bit dtype (or views that only rename a load) and `dk` static.
It is flash.py's kernel with no V and no O: the scores of a chunk come out of the tensor
cores as C fragments, the online softmax's running maximum m and sum l are updated on them
(row statistics across the 4 lanes of a quad), and after the last chunk each statistic is
read from (m, l) as an attention's are (row_state.py, codegen/flash.py's _STATISTIC). The
site is a FlashSite with `soft`, `out` and `v` None and `width` 0; everything downstream
(tiles, the models, the lowering) reads no O from it.
"""

from __future__ import annotations

from . import headpad, ir, packing, row_state, split
from .flash import ELEMENTWISE, FlashSite
from .model import Model
from .operand_reads import one_dtype, renames
from .specialise import fix
from .target import Target

OTHER = "the scores are not one contraction (Q K) under elementwise operations"
DYNAMIC_HEAD = "the head size `{}` must be static"   # (the last test: specialised, it fits)


def examine(g, kernel, model: Model, target: Target, sizes: dict | None = None,
            packed: bool | None = None) -> FlashSite | str | None:
    """The kernel's row statistics of scores alone on tensor cores, why not (a string), or
    None when the kernel streams no such statistics (Model.alone) or computes no product
    (the statistics of loaded values: no tensor-core work)."""
    if model.alone is None:
        return None
    st, x, lse = model.streaming, model.streaming.axis, model.lse
    if any(n in set(st.per_chunk[0]) for n in kernel.stores):
        return "the kernel stores a value of every chunk (S), not only its row statistics"
    loads = set(kernel.loads)
    contractions = [n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Contract)]
    if not contractions:        # (a softmax's or cross-entropy's statistics of loaded values)
        return None
    if len(contractions) != 1:
        return OTHER
    (scores,) = contractions
    for n in kernel.nodes:
        if n in loads or n == scores or n in lse or split.window(g, n):
            continue
        if isinstance(ir.op(g, n), ir.View) and ir.operands(g, n)[0] in loads:
            continue         # a loaded array read at renamed positions (doc[q] beside doc[x])
        if not isinstance(ir.op(g, n), ELEMENTWISE):
            return OTHER
    q, k = ir.operands(g, scores)
    if x in ir.type_of(g, q).axes:
        q, k = k, q
    renamed = tuple((n, renames(g, n)) for n in dict.fromkeys((q, k))
                    if n not in loads and renames(g, n) in loads)
    read = {n for n in (q, k) if n in loads} | {n for n, _ in renamed}
    if len(ir.op(g, scores).axes) != 1 or read != {q, k} or q == k:
        return "Q and K must be loaded arrays (one contracted axis in Q K)"
    dtype = one_dtype(g, target, (q, k), renamed, "Q, K")
    if dtype not in ("f16", "bf16"):
        return dtype
    (dk,) = ir.op(g, scores).axes
    rows_of = {ir.type_of(g, n).axes for n in lse}
    ak = set(ir.type_of(g, k).axes)
    (l_axes,) = rows_of if len(rows_of) == 1 else (None,)
    own_q = [a for a in ir.type_of(g, q).axes if a not in ak and a != dk
             and a in (l_axes or ())]
    if l_axes is None or x not in ak or dk not in ak or not own_q:
        return "the product is not Q[.. q d] K[.. x d] with statistics over its rows"
    rows = packing.fragment_rows(g, kernel, own_q, q, lse[0], sizes, packed)
    head = g.graph["axes"][dk].size
    if head is None:
        return f"{DYNAMIC_HEAD.format(dk)} {fix(g.graph['axes'], dk)}"
    chunk = set(st.per_chunk[0])
    for n in kernel.nodes:
        if n not in chunk and n not in loads and not set(ir.type_of(g, n).axes) <= set(l_axes):
            return "the kernel computes values over other axes than the statistics'"
    batch = tuple(a for a in l_axes if a not in rows)
    padded = headpad.decide(((q, dk, True), (k, dk, True)), ((scores, dk, True),), {dk: head})
    return FlashSite(scores, None, None, q, k, None, packing.name(rows), x, dk, None, batch,
                     dtype, head, 0, lse, row_state.kinds(g, st, lse), (), (),
                     rows if len(rows) > 1 else (), padded, renamed)


__all__ = ["examine"]
