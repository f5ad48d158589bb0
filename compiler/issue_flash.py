"""FlashAttention-2's instruction counts on tensor cores (issue.py's table, its attention part):
what the softmax on the C fragments, the rescales, the fragments' loads and the positions of
masks and biases issue per score, per O element, per HMMA and per chunk, each fitted to or
checked against the SASS of napkin's own attention main loops (benchmarks/model_check.py).
issue.py reads them under its own names (`issue.FLASH_SCORE`)."""

# FlashAttention-2 on tensor cores (the softmax on C fragments in base 2: FMNMX, FFMA and
# MUFU.EX2, the row sums, packing P to 16 bits; per chunk, the rescale of the O fragments
# and each row's rescaling exps), fitted to the main loop of napkin's attention
# (runtime/mainloop.py: the loop over whole chunks; sm_90; d 64 and 128, 16 or 32 rows and
# 16 to 128 keys per warp; FP32 within 10%, MUFU exact): per lane and chunk, FP32 = 4.65 per
# score + 1.65 per O element the lane holds, MUFU = 1 per score + 2 per 16 rows
FLASH_SCORE = (3.65, 1.0, 0)       # per score; the scale `Q K / sqrt(d)` is in its FFMA
                                   # (Model.folded: charged nothing), a bias its own FFMA
                                   # (ALiBi's product too: bias_fold.py)
# an op of the row and key positions only outside a mask (ALiBi's `x - q`) evaluated on the
# score fragments in every chunk: each element's row and key from the lane and the fragment
# (integer IMAD/IADD), the op, its conversion (I2F): per score and lane, fitted to causal
# attention's main loop when its mask was evaluated in every chunk (359 instructions over
# attention's per 64 scores a lane); a mask's ops are MASK_* below
FLASH_INDEX = (0, 0, 5.5)
# ... where the op is the positions a bias's product folded into t's FFMA multiplies
# (Model.bias_positions: ALiBi's `fmaf(qka, (float)(x - q), s)`, bias_fold.py): the lowering
# emits per score the difference from the row's and chunk's shared base (one IADD, its
# fragment offset a constant) and its I2F, the FFMA being the sum's own (INSTRUCTIONS' add).
# The SASS agrees (ALiBi's h100 plan at the default sizes, sm_90, static: its main loop's
# version for chunks the mask holds in is 373 instructions a warp, causal attention's with
# its mask and no bias 375, the mask 51 of them: ALiBi's ops some 3 per score and lane)
FLASH_BIAS_INDEX = (0, 0, 2.0)
# ... and, in a kernel that indexes in 64 bits (Schedule.index, index_width.py), each
# element's row and key in 64-bit integers: a compare is two ISETP (.U32 and .EX), an index
# a pair of IADD3/IMAD.X and its clamp a SEL: once per score and lane for all the kernel's
# ops of positions (nvcc shares the indices among them), in the chunks the mask cuts where
# they are a mask's only (codegen/mma.py runs the others in a loop of their own, without
# it: causal attention's at b = h = q = x = 4096 is 631 instructions a warp, 625 at b = 4,
# h = 16, sm_90), in every computed chunk for an op used outside a mask (ALiBi's `x - q`);
# fitted to causal attention's main loop at b = h = q = x = 4096 when it evaluated its mask
# in every chunk (3.9 per score more than at b = 4, h = 16; sliding-window attention 2.6,
# ALiBi 10.2: its positions are converted to floats in 64 bits)
FLASH_INDEX_WIDE = (0, 0, 3.9)
FLASH_RESCALE = 1.65               # FP32 per O element per chunk
FLASH_ROW_EXPS = 2 / 16            # MUFU per row per lane per chunk (the warp's 32 lanes)
# ... and the fragments' ldmatrix addresses and LDSM themselves: 0.82 per HMMA beside it
# (K's and V's B fragments two per ldmatrix.x4, half an LDSM per HMMA; 1.32 when each was
# its own ldmatrix.x2); the copies and the iteration are COPY_LOOP and ITERATION_TENSOR (FLASH_CHUNK,
# the fit of the whole rest of the loop per chunk, 463, is their 20 + 2 x 225 for K and V)
FLASH_PER_HMMA = 0.82
# Q re-read from shared memory every chunk (Choice.reread): per warp and computed chunk, one
# ldmatrix.x4 per 16 of its rows and 16 of the head, its address a constant offset from one
# computed before the loop. The SASS agrees (sm_80, attention d=64 at 64 x 4 warps x 64 keys
# and 128 x 8 x 128: the main loop re-reading Q has 4 LDSM more and 1 integer op fewer than
# holding it); a GPU run would say what the loads cost beyond their issue slots
FLASH_REREAD = 1.0
