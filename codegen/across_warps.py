"""The merge of a split's partial states across the warps of a block.

A reduced axis split over `ways` lanes (Schedule.split) merges their states by butterfly
shuffles; a shuffle reaches the lanes of one warp only, so a split over more than a warp
(64 to 1024 lanes: compiler/search.SPLITS) merges in two steps:

1. each warp's 32 lanes merge theirs by shuffles of width 32 (`width`), as a split of 32
   does: every lane of the warp then holds the warp's state;
2. the first lane of each warp writes it to shared memory (one buffer per state variable,
   a value or an array of them per warp of the block), and after a barrier every lane of
   the group reads its group's `ways / 32` warps' states and merges them in warp order, the
   first's then each next one's (`merge`), so every lane ends with the same merged state:
   the broadcast the lanes' uses of it need.

The merge operator is the caller's (`step`): the one that merged a shuffled state
(codegen/lane_merges.merge_one, lane_merges.merge's online softmax), given the other state's variables
read from shared memory instead of from another lane. A barrier before the writes lets the
block's reads of the last merge at this site (the blocks' grid-stride loop) finish first.
The barriers need every thread of the block here: the split's lanes make the same trips (a
merge sits after the walks of the split axis, never inside a loop whose trips differ
between lanes: `KernelLowering.serial`), and a block of a multi-warp split launches whole
groups of `ways` lanes (its threads a multiple of them).
"""

from __future__ import annotations

from . import program as P
from . import staging

WARP = 32


def width(ways: int) -> int:
    """The shuffles' width of a split of `ways` lanes: the lanes of one warp at most."""
    return min(ways, WARP)


def merge(lw, ways: int, cells, step) -> None:
    """Merge across the group's warps the state whose variables are `cells` ((C name, C
    type, extent): extent 0 a scalar, n an array of n read at `[z]`), each warp's lanes
    already merged. `step(other)` emits the merge into the cells of the state that
    `other(lvalue, ctype)` names (lvalue: a cell's name, or `name[z]` inside a loop over z).
    Nothing where the split is one warp or less."""
    if ways <= WARP:
        return
    b = lw.b
    warps, block_warps = ways // WARP, -(-lw.threads // WARP)
    buffers = {}
    for name, ctype, extent in cells:
        buf = b.fresh("xw")
        count = block_warps * max(extent, 1)
        lw.smem.append(P.SharedBuffer(buf, ctype, staging.next_offset(lw.smem), str(count)))
        lw.smem_terms.append((count * staging._CBYTES[ctype],))
        b.emit(P.Decl(f"{ctype}* const", buf,
                      f"reinterpret_cast<{ctype}*>(smem + {lw.smem[-1].offset})"))
        buffers[name] = (buf, extent)

    def at(name: str, warp: str, z: str = "z") -> str:
        buf, extent = buffers[name]
        return f"{buf}[{warp}]" if not extent else f"{buf}[({warp}) * {extent} + {z}]"

    def each(fn) -> None:
        """fn(lvalue, name, ctype) for every cell, arrays in a loop over z."""
        for name, ctype, extent in cells:
            if extent:
                b.loop("z", "0", str(extent), "1",
                       lambda name=name, ctype=ctype: fn(f"{name}[z]", name, ctype))
            else:
                fn(name, name, ctype)

    b.emit(P.Barrier())        # the block's reads of this site's last values are done
    b.open()
    each(lambda lv, name, _: b.emit(P.Set(at(name, f"tid / {WARP}"), lv)))
    b.emit(P.If(f"tid % {WARP} == 0", b.close()))
    b.emit(P.Barrier())        # every warp's state written
    first = b.value("int", f"tid / {ways} * {warps}", "xwf")     # the group's first warp
    each(lambda lv, name, _: b.emit(P.Set(lv, at(name, first))))
    names = {}
    for name, _, extent in cells:
        names[f"{name}[z]" if extent else name] = name

    def other(lv: str, ctype: str = "float") -> str:
        return b.value(ctype, at(names[lv], f"{first} + xwi"))
    b.open()
    step(other)
    b.emit(P.For("xwi", "1", f"xwi < {warps}", "++xwi", b.close()))
