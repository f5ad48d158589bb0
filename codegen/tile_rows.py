"""How a tensor-core tile's copy reads the rows of its array (a mixin of codegen/tiles.py's
SharedTiles): whether 16-byte copies are possible (always, by a runtime test of a size, or
never), the narrower width where they are not, and the bytes each copy reads (cp.async's
src-size), all as compiler/copies.row_widths decides and the cost model charges."""

from __future__ import annotations

from ..compiler import copies, ir
from ..compiler.pitch import of as pitch_values

VECTOR = 8       # 16-bit values per 16-byte cp.async
VALUE_BYTES = 16 // VECTOR      # bytes of a tile's value
RVECTOR = 4      # f32 values per 16-byte load of a tile rounded as it is staged
CHUNK = "chunk"  # a tile axis's origin and bound: the chunk being copied


class TileRows:
    def _aligned(self, t: dict) -> str | bool | None:
        """When 16-byte copies are possible (cp.async of 8 16-bit values; a tile rounded as it
        is staged: loads of 4 f32 values): always (True), by a runtime test of a size, or
        never (None). Every pointer argument is 16-byte aligned (Program.alignment: the
        launchers see to it), so only the rows' length decides."""
        axes = ir.type_of(self.g, t["node"]).axes
        axis, extent = t["inner"].name, t["inner"].extent
        if t["computed"]:
            return self.vectorizable(t["node"], axis, extent)
        width = RVECTOR if t["convert"] else VECTOR
        sizes = self._row_sizes(t)
        if axes[-1] != axis or not copies.row_widths(
                extent, [int(s) if s.isdigit() else None for s in sizes], 16 // width)[0]:
            return None
        tests = [f"{s} % {width} == 0" for s in dict.fromkeys(sizes) if not s.isdigit()]
        return " && ".join(tests) if tests else True

    def _row_sizes(self, t: dict) -> list[str]:
        """The lengths (C) of the rows a tile's copy reads (of a pitched array, compiler/pitch.py,
        the multiple its pitch is of: all a copy asks of it): its inner axis's, and a split
        window's or a gather's base's (A[m k] split along k: a window starts at p_k *
        size(s_k) in rows k long; both multiples of the vector, or a copy straddles them)."""
        base, source = self._source(t["node"])
        values = pitch_values(self.model, base)     # (rows padded to a multiple: pitch.py)
        sizes = [str(values) if values > 1 else self.sizes[t["inner"].name]]
        if source is not None:
            sizes.append(self.sizes[ir.type_of(self.g, base).axes[-1]])
        return sizes

    def _narrow(self, t: dict) -> int:
        """Values a copy moves where no 16-byte one can (`_aligned` None): rows along the
        array's contiguous axis of a static size, 8 or 4 bytes where their length allows
        (copies.row_widths: d = 36's 72-byte rows, 4 values; a vector all inside or all
        past a padded head), else 1."""
        axes = ir.type_of(self.g, t["node"]).axes
        axis, extent = t["inner"].name, t["inner"].extent
        if t["computed"] or axes[-1] != axis:
            return 1
        return copies.row_widths(extent, [int(s) if s.isdigit() else None
                                          for s in self._row_sizes(t)],
                                 VALUE_BYTES, not t["convert"])[1]

    def _src_bytes(self, t: dict, valid: str, vector: int, c0: str, clen: str) -> str:
        """The bytes a copy of `vector` values at the thread's column `ei` reads (cp.async's
        src-size; the rest of its 16 bytes zeros): all of them where it is in range, none
        where not; of a pitched array's row (compiler/pitch.py, a size no multiple of the
        vector) only those before the row's (or the chunk's) end: the padding past it is
        never read."""
        nb = vector * VALUE_BYTES
        if vector == 1 or not pitch_values(self.model, self._source(t["node"])[0]):
            return f"({valid}) ? {nb} : 0"
        axis, _, origin, bound = t["inner"]
        if origin == CHUNK:
            left = f"({clen}) - ei"
        else:       # (the whole axis, or a head padded past it: no origin)
            at = f"({origin} + ei)" if origin else "ei"
            left = f"({self.itype})({self.sizes[axis]}) - {at}"
        return f"({valid}) ? (({left}) < {vector} ? (int)({left}) : {vector}) * {VALUE_BYTES} : 0"
