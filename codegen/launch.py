"""Sibling products in one launch (compiler/siblings.py decides which): one kernel whose grid is
the concatenation of the members' block grids.

Each member is lowered as it would be alone, with the launch's parameters (one per array: the
shared operand is one pointer), into a braced scope of its own. Its grid-stride loop over its
own tiles becomes a loop over the summed tiles that takes only its own range:

    const long long sib0 = <member 0's tiles>, sib1 = ...;
    { member 0's prologue
      for (long long gblk = blockIdx.x; gblk < sib0 + sib1 + ...; gblk += gridDim.x) {
        if (gblk < 0 || gblk >= 0 + sib0) continue;
        const unsigned blk = (unsigned)(gblk - 0);
        member 0's tile } }
    { member 1's ... with its offset sib0 }

`gblk` is the same for every thread of a block, so each block takes one branch whole (its
barriers are reached by all its threads). Any grid covers the tiles (the emulator launches
16 blocks); the launchers size it to the summed tiles (program.KernelProgram.parts).
"""

from __future__ import annotations

from . import program as P

TILE_LOOP = "blk"       # the grid-stride loop variable of kernel.py's _grid


def together(name: str, params: tuple, members: list[P.KernelProgram]) -> P.KernelProgram:
    """One kernel program running each member's tiles in its range of one grid."""
    counts = [f"sib{i}" for i in range(len(members))]
    total = " + ".join(counts)
    body = []
    for i, k in enumerate(members):
        body.append(P.Decl("const long long", counts[i], f"(long long)({_tiles(k)})"))
    for i, k in enumerate(members):
        offset = " + ".join(counts[:i]) or "0"
        body.append(P.Block(tuple(_ranged(s, offset, counts[i], total) for s in k.body)))
    first = members[0]
    threads = {k.threads for k in members}
    assert len(threads) == 1, threads       # (siblings.decide: one block shape)
    wgmma = tuple(dict.fromkeys(v for k in members for v in k.wgmma))
    return P.KernelProgram(name, params, first.threads, first.blocks, first.smem_bytes_formula,
                           tuple(b for k in members for b in k.smem), tuple(body),
                           first.index_type, first.kernel, wgmma,
                           parts=tuple((k.blocks, k.smem_bytes_formula) for k in members))


def _tiles(k: P.KernelProgram) -> str:
    """The C expression of a member's tile count (its `nblocks`)."""
    found = [s.init for s in k.body if isinstance(s, P.Decl) and s.name == "nblocks"]
    assert len(found) == 1, k.name
    return found[0]


def _ranged(s, offset: str, count: str, total: str):
    """A member's statement; its tile loop walking the summed tiles and taking its own."""
    if not (isinstance(s, P.For) and s.var == TILE_LOOP):
        return s
    bt = s.ctype
    head = (P.Continue(f"gblk < {offset} || gblk >= {offset} + {count}"),
            P.Decl(f"const {bt}", TILE_LOOP, f"({bt})(gblk - ({offset}))"))
    return P.For("gblk", "(long long)blockIdx.x", f"gblk < {total}", "gblk += (long long)gridDim.x",
                 head + tuple(s.body), s.unroll, "long long")


__all__ = ["together"]
