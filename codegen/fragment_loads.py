"""The ldmatrix loads of a tensor-core kernel's fragments from its shared tiles: A and B fragments,
two B fragments by one ldmatrix.x4, the lane's row address in a swizzled or padded tile (a mixin of
codegen/mma.py's MmaLowering, which FlashAttention's and the chain's lowerings extend)."""

from __future__ import annotations

from . import program as P
from .tiles import offset


class FragmentLoads:
    def _b_fragments(self, t: dict, count: int, dest, first, k0, var: str, along: str = "n",
                     body=None) -> None:
        """`count` B fragments of the tile, fragment i at `dest(i)` from column `first(i)` and
        k `k0(i)` (C, of the loop index `var`): two by one ldmatrix.x4 (`_ldmatrix_pair`; the
        pair's second is the next 8 columns, or the next 16 of k with along="k"), an odd last
        one by ldmatrix.x2; `body(i)`, when given, runs after each pair's or single's load
        for the fragments loaded (the products that read them)."""
        pairs, odd = divmod(count, 2)

        def pair():
            i0, i1 = f"(2 * {var})", f"(2 * {var} + 1)"
            self._ldmatrix_pair(t, dest(i0), dest(i1), first(i0), k0(i0), along)
            if body is not None:
                body(i0)
                body(i1)
        if pairs and odd:       # each pair written out: nvcc (13, sm_90) kept the accumulators
            for j in range(pairs):  # of an odd count indexed by the pairs' unrolled loop in
                def one(j=j):       # local memory (P V over 5 fragments: 160 bytes of stack,
                    self.b.emit(P.Decl("const int", var, str(j)))   # LDL/STL per chunk)
                    pair()
                self.b.emit(P.Block(self._scoped(one)))
        elif pairs:
            self._each([(var, pairs)], pair)
        if odd:
            last = str(count - 1)
            self._ldmatrix(t, dest(last), first(last), k0(last), 2)
            if body is not None:
                body(last)

    def _ldmatrix_pair(self, t: dict, dest0: str, dest1: str, first: str, k0: str,
                       along: str) -> None:
        """Two B fragments by one ldmatrix.x4: matrices 0, 1 (k 0-7, 8-15 of 8 columns from
        `first`) into dest0, matrices 2, 3 into dest1: the next 8 columns (along="n") or the
        next 16 of k (along="k"). Lanes 16-31 address the second fragment's rows."""
        col = [first] + (["(lane / 16) * 8"] if along == "n" else [])
        kk = [k0] + (["(lane / 16) * 16"] if along == "k" else [])
        if t["inner"].name == t["k"]:
            k = " + ".join(kk + ["((lane / 8) % 2) * 8"])
            address, suffix = self._fragment_address(t, col[0], " + ".join(col[1:] + ["lane % 8"]),
                                                    k), ""
        else:
            trow = " + ".join(col)
            address, suffix = self._fragment_address(t, kk[0], " + ".join(
                kk[1:] + ["lane % 8", "((lane / 8) % 2) * 8"]), trow), "_trans"
        self.b.emit(P.Call(f"napkin_ldmatrix_x4_pair{suffix}",
                           (dest0, dest1, address)))

    def _ldmatrix(self, t: dict, dest: str, first: str, k0: str, count: int) -> None:
        """Fragments of `count` 8x8 matrices from the tile: this lane's row address.

        Lanes 8j..8j+7 address matrix j. A (x4): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15),
        row-block fastest; B (x2): k 0-7 then 8-15 of 8 columns. Stored k-contiguous, a lane
        addresses a row of the fragment axis; stored the other way, a row of k (.trans).
        Every row origin (`first`, `k0`) is a multiple of 8, so a swizzled tile's term is
        the lane's row within its 8: `lane % 8` (tiles.offset)."""
        if count == 4:
            row, k = "lane % 16", f"{k0} + (lane / 16) * 8"
            trow, tk = f"{first} + ((lane / 8) % 2) * 8", "lane % 8 + (lane / 16) * 8"
        else:
            row, k = "lane % 8", f"{k0} + ((lane / 8) % 2) * 8"
            trow, tk = first, "lane % 8 + ((lane / 8) % 2) * 8"
        if t["inner"].name == t["k"]:
            address, suffix = self._fragment_address(t, first, row, k), ""
        else:
            address, suffix = self._fragment_address(t, k0, tk, trow), "_trans"
        self.b.emit(P.Call(f"napkin_ldmatrix_x{count}{suffix}", (dest, address)))

    def _fragment_address(self, t: dict, origin: str, lane_row: str, col: str) -> str:
        """The shared address (C) a lane's ldmatrix row starts at, in the tile's stage in
        use: row `origin + lane_row` (origin a multiple of 8: a fragment's or a 16 of k's
        start), column `col` (tiles.offset). In a swizzled tile the lane's part, `lane_row *
        pitch + (col ^ term)` in bytes, is computed once per thread before every loop
        (`Builder.invariant`: a table over the unrolled fragment and k-step indices it
        reads); the address is the tile's start, plus that entry and the stage's bytes (an
        add per entry and chunk), plus the origin's rows (an immediate of the LDSM). Written
        as `(tile + stage * count) + ...` in values, ptxas recomputed the stage's start at
        each LDSM (an IMAD and a shift). A padded or plain tile's address is as it always
        was."""
        layout = t["layout"]
        if not layout.mask:
            return f"{self.at(t)} + {offset(layout, f'{origin} + {lane_row}', col)}"
        lane = self.b.invariant("int", f"({offset(layout, lane_row, col, 'lane % 8')}) * 2", "sw")
        stage = f" + stage * {t['count'] * 2}" if t["stages"] > 1 else ""
        return (f"reinterpret_cast<const char*>({t['name']}) + ({lane}{stage}) + "
                f"({origin}) * {layout.pitch * 2}")
