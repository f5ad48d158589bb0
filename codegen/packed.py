"""Packed fragment rows in the lowering (compiler/packing.py): row i of the rows `r x q` at
(r, q) = (i / size(q), i % size(q)).

Q's and O's addresses read each row's decomposition (`unpacked`, for the tile copies and
points without a lane's table); a lane's own fragment rows are fixed for the whole key loop,
so under a mask that reads q (causal speculative decoding) they are decomposed once per block
before the chunks (`_lane_rows`) and each score reads its row's q from the lane's table: the
key loop divides by no size (the division by a runtime size(q) was I2F.RP, MUFU.RCP and a
dozen integer ops per score; static SASS, sm_90: 479 -> 441 instructions per 32 HMMA)."""

from __future__ import annotations

from . import program as P
from .builder import Ix


class PackedRows:
    lane_rows: dict = {}    # packed axis -> the lane's table of its rows' index (_lane_rows)

    def _lane_rows(self, fm: int) -> None:
        """Packed rows (compiler/packing.py): each of the lane's fragment rows, clamped into
        the packed axis, and its (r, q) = (i / size(q), i % size(q)), computed once per block
        into `pr*[fm][2]` before the chunks (a lane's rows are fixed for the whole key loop,
        as the row vectors are), where `_point(row=slot)` reads them: the key loop divides by
        no size. The tables are put here by `_place_lane_rows`, after the loop, where it read
        them (a mask over q); else a point divides, as before. Nothing where the rows are one
        axis."""
        s, b = self.site, self.b
        packed = getattr(s, "packed", ())
        self.lane_rows = {}
        if not packed:
            return
        names = {a: b.fresh("pr") for a in (s.row, *packed)}
        top = f"({self.itype})({self.sizes[s.row]} - 1)"

        def fill():
            v = b.value(self.itype, self._row("(2 * i5)"), "pt")
            b.emit(P.Set(f"{names[s.row]}[i0][i5]", f"({v} < {top} ? {v} : {top})"))
            rest = f"{names[s.row]}[i0][i5]"
            for a in reversed(packed[1:]):
                b.emit(P.Set(f"{names[a]}[i0][i5]", f"({rest} % ({self.itype})({self.sizes[a]}))"))
                rest = f"({rest} / ({self.itype})({self.sizes[a]}))"
            b.emit(P.Set(f"{names[packed[0]]}[i0][i5]", rest))

        def tables():
            for name in names.values():
                b.emit(P.Decl(self.itype, name, shape=(fm, 2)))
            self._each([("i0", fm), ("i5", 2)], fill)
        self.lane_rows, self._lane_at = names, (b.mark(), self._scoped(tables))

    def _place_lane_rows(self) -> None:
        """After the key loop: `_lane_rows`'s tables before the chunks if what was emitted since
        (the loop) reads one, else here, after it (no registers held across the loop): the
        epilogue's points read their row's (r, q) from them, one division a lane's row where
        each two stored elements divided (compiler/packing.UNPACK_ROW)."""
        if not self.lane_rows:
            return
        (frame, at), tables = self._lane_at
        since = repr(tuple(frame[at:]))
        read = any(f"{name}[" in since for name in self.lane_rows.values())
        self.b.insert((frame, at) if read else self.b.mark(), tables)

    def unpacked(self, scope: dict) -> dict:
        """`scope` with the axes packed fragment rows run along (compiler/packing.py): row i at
        (i / size(q), i % size(q)) for rows r x q (Q and O addressed per row)."""
        packed = getattr(self.site, "packed", ())
        if not packed or self.site.row not in scope:
            return scope
        rest = self.b.value(self.itype, scope[self.site.row].expr, "pk")
        for a in reversed(packed[1:]):
            scope[a] = Ix(f"({rest} % ({self.itype})({self.sizes[a]}))")
            rest = f"({rest} / ({self.itype})({self.sizes[a]}))"
        scope[packed[0]] = Ix(rest)
        return scope
