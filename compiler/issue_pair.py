"""What every lane of a CUDA-core split issues per key of a paired online softmax (attention on
the CUDA cores): the score's ops on each lane, the shuffles summing the score's partial
products, the softmax's update folding groups of keys (issue.py charges each op once per
element; this is the rest, for a kernel pairing a softmax with a contraction over its
streamed axis: Model.streaming.pairs).

With the head d split over `w` lanes (Schedule.split) and the keys streamed, each lane
computes its d/w terms of a score's product with Q, the lanes sum them by log2(w) shuffles
and adds (codegen: napkin_lanes_sum), and then ALL w lanes hold the score and compute what
follows it (the scale, a bias, a mask, the online softmax) with the same values: those ops
issue w times per score, not once. The online softmax folds Schedule.fold keys per update
(compiler/fold.py, codegen/accum._online_softmax): one max update, one rescale of the
running sum and of the lane's d/w values of the output row per group.

The constants are counted in the SASS of attention on the CUDA cores (sm_90, static, the key
loop of the h100 plan at the default sizes: 16 lanes split d = 64, 8 rows a thread, groups
of 4 keys: 1195 instructions per group and thread, 37.3 per row and key: 4 FFMA of Q K and
4 of P V, an LDS and an HADD2 of K's and V's values a row shares with 7 others
(issue_simt.READ_UNROLLED), 4 SHFL and 4 FADD of the lanes' sum, the scale's FMUL, the
output row's rescale (4 FMUL a group) and the online softmax's 69 a group of 4 below).
"""

from __future__ import annotations

import numpy as np

from .across_warps import WARP
from .fold import splits

# Per score and lane: the running max (napkin_max propagating NaN: 2 FSETP, 2 FSEL), one
# exponential (the score less the max, cexpr.shifted_exp: FADD, FMUL, MUFU.EX2; IEEE expf
# was 2 FADD, 4 FFMA, FMUL, MUFU.EX2, SHF: (12, 1, 1)), the running sum's FADD:
# (fp32, mufu, other) ...
PAIR_SCORE = (7, 1, 0)
# ... per group of Schedule.fold keys and lane: the shift (FSETP, FSEL), the rescale's
# exponential (exp(m_old - m_new): FADD, FMUL, MUFU; IEEE expf's 7 fp32 made it (9, 1, 3)),
# the loop's share of its indices and moves; the 4 scores' 56 and these 13 were the 69
# counted per row and group with expf (model_check --kernels: attention on the CUDA cores
# 0.89 SASS/model before ex2, 0.87 after) ...
PAIR_GROUP = (4, 1, 2)
# ... and the output row's rescale: one FMUL per value of it a lane holds (d / w)
PAIR_RESCALE = 1
# The lanes' sum of a contraction's partial terms: per step of the butterfly (log2 w), one
# SHFL (other) and one FADD (fp32), per output element and lane
MERGE_STEP = (1, 0, 1)


def paired(model, choice) -> bool:
    """Whether the kernel is a paired online softmax on the CUDA cores, streamed (this
    module's charges apply)."""
    return bool(model.streaming.pairs) and not choice.warps and bool(choice.stream)


def replicated(model, choice, w):
    """How many lanes run work item `w` at each key (1, or per candidate): an elementwise op
    or the softmax along the streamed axis runs on every lane of a split of another axis it
    lacks (the head d: each lane holds the whole score after the lanes' sum). Outside a
    paired softmax, what a kernel computes after its lanes' merge (an op without the split
    axis: swiglu's silu and product of the merged sums, RMSNorm's rsqrt) runs on every lane
    of the split as well (`beside`)."""
    if not paired(model, choice):
        return beside(choice, w.axes)
    if w.engine != "simt" or choice.stream[0] not in w.axes:
        return 1
    out = 1
    for a, ways in splits(choice):
        if a != choice.stream[0] and a not in w.axes:
            out = out * ways
    return out


def beside(choice, axes):
    """Lanes that run a statement over `axes` for each of its points (1, or per candidate):
    every lane of a split of an axis it lacks (after their merge each holds the whole
    value; a store among them is predicated to one, but the warp issues it). Counted in
    swiglu's first kernel at the small shape (16 lanes split m: its 8 silus, products and
    stores a thread issued by every lane, 469 instructions a warp after the lane loop, sm_90,
    static; counted once a point they were 158, static SASS/model 1.42)."""
    out = 1
    for a, ways in splits(choice):
        if a not in axes:
            out = out * ways
    return out


def softmax(model, choice, sizes: dict, w, fold, plain) -> tuple:
    """A paired softmax's (fp32, mufu, other) per score and lane (PAIR_*), folding `fold`
    keys per update (compiler/fold.keys, per candidate); `plain` (issue.INSTRUCTIONS's)
    where the candidate's lanes split the streamed axis (a merge of split states walks it,
    one key at a time)."""
    thread = dict(choice.thread)
    split = dict(splits(choice))
    pv = dict(model.streaming.pairs)[w.node]
    width = 1      # the output row's values a lane holds: its thread tile, its split share
    for a in next(x.axes for x in model.work if x.node == pv):
        if a not in w.axes:
            width = width * (thread[a] if a in thread else sizes[a] / split.get(a, 1))
    group = (PAIR_GROUP[0] + PAIR_RESCALE * width,) + PAIR_GROUP[1:]
    walked = np.asarray(split.get(choice.stream[0], 1))
    return tuple(np.where(walked > 1, p, s + np.divide(g, fold))
                 for s, g, p in zip(PAIR_SCORE, group, plain))


def merges(model, choice, sizes: dict, w, amount) -> tuple:
    """(fp32, other) of the lanes' sums of contraction `w`'s partial terms at each key (its
    points `amount`): where it reduces a split axis (Q K over d, not the pair's contraction
    over the keys), log2(ways) MERGE_STEPs per output element and lane of the split."""
    pairs = {c for _, c in model.streaming.pairs}
    if not paired(model, choice) or w.engine != "contraction" or w.node in pairs or \
            choice.stream[0] not in w.axes:
        return 0.0, 0.0
    steps = 0.0
    for a, ways in splits(choice):
        if a in w.axes and a != choice.stream[0] and a in model.reduced:
            ways = np.asarray(ways, dtype=float)
            # (shuffles within a warp: a split over several merges them as across_warps.py)
            steps = steps + amount / sizes[a] * ways * np.log2(np.clip(ways, 1.0, WARP))
    return steps * MERGE_STEP[0], steps * MERGE_STEP[2]
