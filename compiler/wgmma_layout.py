"""Which staged operand tiles a wgmma matrix descriptor can describe, and with what fields.

A tensor-core operand tile (compiler/tilelayout.py) is `[outer][inner]` 16-bit values, XOR-
swizzled by 16-byte chunks where its rows are 2, 4 or a multiple of 8 chunks. wgmma
(runtime/emulate/napkin_emulate_wgmma.h, codegen/wgmma_ptx.py) reads an operand through a
descriptor naming one of the PTX ISA's canonical layouts: lines of W = 32, 64 or 128 bytes,
eight lines to a 1024-byte-periodic swizzle atom, or unswizzled 8 x 16-byte core matrices.
The tile's rule coincides with them exactly where a row is one line:

- rows of 16, 32 or 64 values (2, 4, 8 chunks: the tile's `(r >> shift) & mask` is the
  32-, 64- and 128-byte swizzle of the row's address), contracted axis inner (K-major: a
  row is an M or N position, SBO the 8 rows' 8 W bytes) or outer (MN-major: a row is a k,
  SBO the next 8 of k; the operand's M or N is the row's W / 2 values, one atom wide);
- rows of 8 values (one chunk, "plain"), contracted axis outer: eight consecutive k rows are
  one core matrix (LBO = 128 bytes to the next eight); N = 8;
- MN-major rows cut into blocks of 64 values (TileLayout.block, which a wgmma schedule gives
  an operand stored along a fragment axis longer than 64): each block a 128-byte swizzled
  tile, LBO the bytes of one block (the next 64 of M or N).

Anything else (rows of 128 values or more, padded rows, a plain tile's K-major rows) is not
canonical: None. Swizzled tiles must start 1024-byte aligned in shared memory (the pattern
follows the address), every stage too.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tilelayout import TileLayout

MODES = {32: "32B", 64: "64B", 128: "128B"}   # line bytes -> the descriptor's swizzle
BYTES = 2                                     # f16 / bf16


@dataclass(frozen=True)
class Descriptor:
    """The fields of an operand's descriptors (bytes) and where each k16 step starts."""
    swizzle: str         # "none" | "32B" | "64B" | "128B" (wgmma_ptx.SWIZZLE's keys)
    lbo: int             # leading dimension byte offset
    sbo: int             # stride dimension byte offset
    step: int            # bytes from one k16 step's start to the next's
    rows64: int          # bytes from the tile's start to its row (M or N) 64, where a second
                         # warpgroup's rows start (0: a tile of at most 64 rows, in one line)
    mn_major: bool       # the instruction's transpose flag for the operand
    align: int           # the alignment the tile's (and each stage's) start needs


def descriptor(layout: TileLayout, contracted_inner: bool) -> Descriptor | None:
    """The descriptor of an operand staged in `layout`, whose contracted axis is the inner
    (contiguous) one or the outer; None where no canonical layout matches."""
    line = layout.inner * BYTES
    if layout.block:            # MN-major rows in blocks of 64 values: 128-byte atoms side by side
        if contracted_inner or layout.block * BYTES != 128:
            return None
        side = layout.outer * 128                           # the next block of 64 rows
        return Descriptor("128B", side, 8 * 128, 16 * 128, side, True, 1024)
    if layout.pitch != layout.inner:
        return None                                         # padded rows
    if layout.mask and line in MODES:
        if contracted_inner:
            return Descriptor(MODES[line], 16, 8 * line, 16 * BYTES, 64 * line, False, 1024)
        return Descriptor(MODES[line], 16, 8 * line, 16 * line, 0, True, 1024)
    if not layout.mask and layout.inner == 8 and not contracted_inner:
        return Descriptor("none", 8 * line, 8 * line, 16 * line, 0, True, 16)
    return None

__all__ = ["Descriptor", "descriptor", "MODES"]
