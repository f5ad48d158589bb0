"""The issue cost of attention's mask on the tensor cores: its ops per score where it cuts a
chunk, or per key where it reads no row position (issue.py reads it for FlashAttention-2's
score fragments)."""

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
# A floor division of 64-bit indices (napkin_floordiv, compiler/monotone.py) beyond its
# MASK_OP: by a power of two a shift and its sign's fix-up, by another constant a multiply by
# its reciprocal (IMAD.HI pairs) and the fix-up. SASS (sm_90, static, NVRTC 13) of block-causal
# attention's main loop, h100 b=4 h=16 q=x=4096 d=64 at 128 rows and 64-key chunks (8 warps,
# 32 scores a lane and chunk), against causal's 462: `x // 64 <= q // 64` 691 (+7.2 a score,
# two divisions), `x // 48 <= q // 48` 914 (+14.1). A divisor read from a size is charged as
# another constant's (not counted: a 64-bit division by a run-time value is longer)
MASK_DIVIDE = {True: 2.6, False: 6.1}      # by a power of two, by another divisor


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
    if kind == "floordiv":
        by = expr[2][1] if expr[2][0] == "const" else 3.0
        parts += MASK_DIVIDE[float(by).is_integer() and by > 0 and not int(by) & (int(by) - 1)]
    return parts + MASK_OP + MASK_SIZE * any(isinstance(e, tuple) and e[0] == "size"
                                             for e in expr[1:])


# A mask of the key alone (no row position: paged attention's `x < len[b]`, b one position
# a block) is evaluated once per key a lane holds, not per score (a lane holds 2 keys of
# each 8-key fragment, 4 of 16, for all its rows): per key the key's index from the lane
# and the chunk and its clamp to the axis (MASK_KEY), the mask's ops (mask_ops), and in a
# kernel that indexes in 64 bits each of these in pairs (issue.FLASH_INDEX_WIDE, per key);
# per warp and chunk it cuts, the test whether it cuts the chunk and the branch around it,
# the data the mask reads (len[b]'s LDG) and its sign (MASK_KEY_CHUNK, warp instructions).
# Counted in paged_attention's main loop (sm_90, static, h100 plan at the default sizes,
# 64-bit indices: 39 integer instructions a warp and chunk for its 4 keys a lane, 8 a key
# (IADD3/IMAD.X, two ISETP and two SEL of the clamp, two ISETP of the compare) and 7 a
# chunk; the model 4 x 6.9 + 7 = 34.6). Before, the model charged the mask its `lt` per
# key and block only (its axes b and x are not the fragments' rows and keys): 1.6 a chunk.
MASK_KEY = 2.0
MASK_KEY_CHUNK = 7.0
KEY_SHARE = 4       # a lane holds 2 of each 8-key fragment's columns: a chunk's keys / 4


def key_only(model, choice, w) -> bool:
    """Whether work item `w` is a mask op of the streamed key alone: a mask node along the
    streamed axis reading no row position (none of the warps' axes: its others, a batch
    axis, hold one position a block in FlashAttention-2's plans)."""
    if not choice.stream or w.node not in model.mask_nodes:
        return False
    rows = {a for a, _ in choice.warps}
    return choice.stream[0] in w.axes and not rows & set(w.axes)


def per_key_chunk(model, choice, wide_pairs) -> float:
    """Lane-instructions each lane issues per warp and chunk the mask cuts, for a mask of the
    key alone: per key it holds (the chunk's keys / KEY_SHARE) MASK_KEY, the mask's ops and
    `wide_pairs` (64-bit indices: issue.FLASH_INDEX_WIDE, 0 else), and MASK_KEY_CHUNK."""
    keys = choice.stream[1] / KEY_SHARE
    return keys * (MASK_KEY + mask_ops(model.mask, choice.stream[0]) + wide_pairs) + \
        MASK_KEY_CHUNK
