"""The issue cost of attention's mask on the tensor cores: its ops per score where it cuts a
chunk (issue.py reads it for FlashAttention-2's score fragments)."""

from __future__ import annotations

# A mask's condition (Model.mask), evaluated on the score fragments of the chunks it cuts
# (codegen/flash.py), per score and lane: its ops share each score's row and key (the key
# clamped to the axis, one VIADDMNMX per key a lane holds: MASK_POSITIONS), each comparison
# or integer op of positions is one ISETP or IADD (MASK_OP), and one more MASK_SIZE where it
# reads a size (a kernel parameter of 64 bits: the compare's .EX half and the other side's
# sign), `and`/`or`/`not` fold into the predicates (ISETP's .AND: nothing), and an integer
# input read along the streamed axis (varlen's `doc[x]`) costs its LDG and 64-bit address
# per key (MASK_READ). Counted in the SASS of the masked path (sm_90, int indices; the
# `where`'s FSEL is the table's): causal attention at b = 4, h = 16, q = x = 4096, 103 for
# 64 scores (1.6; the model 1.6); varlen attention at the default sizes, 57 for 16 (3.6;
# model 3.6); sliding-window attention at b = 4, h = 16, q = x = 4096, 100 for 16 (6.25;
# model 5.1: its row positions are not hoisted). A kernel that indexes in 64 bits adds
# FLASH_INDEX_WIDE (in every chunk).
MASK_POSITIONS = 0.6
MASK_OP = 1.0
MASK_SIZE = 1.5
MASK_READ = 1.0


def mask_ops(expr, stream) -> float:
    """Lane-instructions per score of a mask's ops past the positions (MASK_* above)."""
    kind = expr[0]
    if kind == "data":           # an integer input: loaded per key where read along the axis
        return MASK_READ if stream in expr[2] else 0.0
    if kind in ("index", "size", "const", "unknown"):
        return 0.0
    parts = sum(mask_ops(e, stream) for e in expr[1:] if isinstance(e, tuple))
    if kind in ("and", "or", "not"):
        return parts
    return parts + MASK_OP + MASK_SIZE * any(isinstance(e, tuple) and e[0] == "size"
                                             for e in expr[1:])
