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


def splits(choice) -> list:
    """(axis, ways) of every axis a Choice splits over lanes, or a candidate set (Choices:
    ways per candidate, 1 where a candidate does not split it) may."""
    if not choice.split:
        return []
    return [choice.split] if isinstance(choice.split[0], str) else list(choice.split)


def keys(model, choice):
    """Keys folded per update (1: one at a time) for a kernel's `model` and a `choice` (or
    candidate set: per candidate): FOLD where the kernel is on the CUDA cores, pairs a
    softmax with a contraction over the streamed axis (online softmax), its chunk holds a
    group, and its lanes do not split the streamed axis (they would walk it with strides of
    their own)."""
    if choice.warps or not model.streaming.pairs or not choice.stream:
        return 1
    axis, chunk = choice.stream
    walked = 1
    for a, ways in splits(choice):
        if a == axis:
            walked = walked * ways
    if np.ndim(chunk) or np.ndim(walked):
        return np.where((np.asarray(chunk) >= FOLD) & (np.asarray(walked) == 1), FOLD, 1)
    return FOLD if chunk >= FOLD and walked == 1 else 1
