"""The shared-memory layout of a tensor-core operand tile: XOR-swizzled, plain or padded rows.

A tile is `[outer][inner]` 16-bit values, `inner` the axis contiguous in the array (so the
copy into it is coalesced). Its rows are read by ldmatrix eight at a time, 16 bytes from
each (one row of an 8 x 8 matrix), and written by cp.async 16 bytes at a time. Shared memory
has 32 banks of 4 bytes: a 128-byte line. Eight 16-byte reads are conflict-free when they
cover the line's eight 16-byte chunks once each.

- **Swizzled** (rows of 2 or 4 chunks, or a multiple of 8 chunks): no padding; the 16-byte
  chunk `c` of row `r` is stored at chunk `c ^ ((r >> shift) & mask)` of the row. With 8 or
  more chunks a row (rows of 128 bytes or a multiple) the term is `r % 8` on the chunk's low
  three bits: eight consecutive rows read at one logical chunk land in eight different
  chunks of the line. With 4 chunks (64-byte rows) two rows share a line and the term is
  `(r >> 1) % 4`; with 2 chunks (32 bytes), `(r >> 2) % 2` (on the value offset, CUTLASS's
  `Swizzle<B, 3, S>`, B = 1, 2, 3, S = 3 up to 64-value rows, log2(inner) - 3 beyond;
  FlashAttention-2's `Swizzle<3, 3, 3>` for 64-value rows). The term repeats every 8 rows,
  and every row origin the kernels read from (fragment starts, chunk starts) is a multiple
  of 8, so a lane's term depends on its own row within the 8 only.
- **Plain** (rows of an odd number of chunks: 1, 3, 5, ...): neither; consecutive rows start
  an odd number of chunks apart, so eight of them cover the line's eight chunks.
- **Padded** (the rest: 6, 10, 12, 14, ... chunks, a value width of 48): each row is
  followed by `ROW_PAD` values (one chunk), which makes the rows' distance odd.

The rule is decided once per tile, in the planner's Schedule (`Schedule.layouts`, built by
`staged_tiles.operand_layouts`), which codegen reads (codegen/tiles.py: every store
into a tile and every ldmatrix address go through one `offset`), and in the shared-memory
footprint M (compiler/memory.py), vectorised over the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

VALUES = 8       # 16-bit values per 16-byte chunk (one cp.async, one ldmatrix row)
LINE = 8         # chunks per 128-byte line of the 32 banks
ROW_PAD = 8      # values after each row of a padded tile (one chunk: the rows' bank shift)


def swizzles(inner):
    """Whether a tile with rows of `inner` 16-bit values is swizzled: rows of 2 or 4 chunks,
    or a multiple of 8 chunks. Numbers or NumPy arrays (the planner's candidates)."""
    chunks = inner / VALUES
    return (inner % VALUES == 0) & ((chunks == 2) | (chunks == 4)
                                    | (inner % (VALUES * LINE) == 0))


def plain(inner):
    """Whether a tile with rows of `inner` values needs neither swizzle nor padding: rows of
    an odd number of chunks."""
    return (inner % VALUES == 0) & ((inner / VALUES) % 2 == 1)


def row_pad(inner):
    """Values after each row of a tile with rows of `inner` values: ROW_PAD where the rows
    are neither swizzled nor plain, else 0."""
    return (1 - (swizzles(inner) | plain(inner))) * ROW_PAD


@dataclass(frozen=True)
class TileLayout:
    """One tile's layout: `[outer][pitch]` values, chunk c of row r at c ^ ((r >> shift) &
    mask) (mask 0: no XOR, plain or padded rows). `block` (a wgmma schedule's operand whose
    rows are longer than 64 values, compiler/wgmma.py): the rows are cut into blocks of
    `block` values, `[inner / block][outer][block]`, each swizzled as a tile of rows of
    `block` (the PTX ISA's 128-byte swizzle atoms side by side); `pitch` is then `block`."""
    axes: tuple[str, str]  # (the rows' axis, the contiguous one)
    outer: int           # rows
    inner: int           # values a row holds
    pitch: int           # values from a row to the next: inner, or inner + ROW_PAD
    shift: int
    mask: int
    block: int = 0       # values a row block holds (0: the rows are whole)

    @property
    def swizzled(self) -> bool:
        return self.mask > 0

    @property
    def kind(self) -> str:
        return "swizzled" if self.mask else "padded" if self.pitch > self.inner else "plain"

    @property
    def count(self) -> int:
        """Values one stage of the tile takes."""
        return self.outer * (self.inner if self.block else self.pitch)


def layout(outer: int, inner: int, axes: tuple[str, str] = ("", ""),
           block: int = 0) -> TileLayout:
    """The layout of an `outer x inner` tile (the rule above) over `axes` (rows, inner);
    with `block` (a divisor of `inner` smaller than it), in row blocks of that many values."""
    if block and block < inner:
        one = layout(outer, block, axes)
        return TileLayout(axes, outer, inner, block, one.shift, one.mask, block)
    if not swizzles(inner):
        return TileLayout(axes, outer, inner, inner + int(row_pad(inner)), 0, 0)
    chunks = inner // VALUES
    if chunks >= LINE:
        return TileLayout(axes, outer, inner, inner, 0, LINE - 1)
    # rows of 2 or 4 chunks: LINE / chunks rows share a line, the term steps once per line
    return TileLayout(axes, outer, inner, inner, (LINE // chunks).bit_length() - 1, chunks - 1)


__all__ = ["TileLayout", "layout", "swizzles", "plain", "row_pad", "ROW_PAD", "VALUES", "LINE"]
