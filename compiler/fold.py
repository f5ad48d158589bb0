"""How many keys a CUDA-core thread folds into a paired online softmax at once (Schedule.fold).

A thread's online softmax (codegen/accum.py) folds a group of `fold` consecutive positions of
the streamed axis per update: their scores, one running-max update over all of them, ONE
rescale of the running sum and of the output row (exp(m_old - m_new)), one exponential per
score, the scores' products with the other operand added to the rescaled row. Folding one
key at a time costs two exponentials and a rescale of the row per key. The chunk's last
`clen mod fold` keys are folded one at a time (codegen/kernel.py's remainder loop).

FOLD was picked by the static SASS of attention on the CUDA cores (sm_90, h100 plans at the
default sizes, benchmarks/sass_simt.py's weighted block, per warp and block): 439,788
instructions folding 1 key at a time, 4 keys (the rescale's exponential, its MUFU and the
row's FMUL per group of 4), 8 keys (registers: the group's K and V values are held for all
the thread's rows) -- see docs/cost-model.md for the figures.
"""

from __future__ import annotations

import numpy as np

FOLD = 4


def keys(model, choice):
    """Keys folded per update (1: one at a time) for a candidate `choice` of a kernel's
    `model`: FOLD where the kernel is on the CUDA cores, pairs a softmax with a contraction
    over the streamed axis (online softmax), and its lanes do not split the streamed axis
    (they would walk it with strides of their own); per candidate where the chunk is an
    array (the search's candidates: 1 where the chunk is shorter than FOLD)."""
    if choice.warps or not model.streaming.pairs or not choice.stream:
        return 1
    if choice.split and choice.split[0] == choice.stream[0]:
        return 1
    chunk = choice.stream[1]
    if np.ndim(chunk):
        return np.where(np.asarray(chunk) >= FOLD, FOLD, 1)
    return FOLD if chunk >= FOLD else 1
