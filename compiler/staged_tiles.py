"""The tiles a tensor-core site stages in shared memory and their layouts (the Schedule's
`layouts`, compiler/schedule.py), which codegen reads (codegen/tiles.py): every operand
of a plain product, FlashAttention or a chain once, with its fragment (or row) axis and its
k axis, a head padded to whole fragments (headpad.py), each laid out for a coalesced copy.
"""

from __future__ import annotations

from . import headpad, ir, packing, tilelayout, wgmma
from .chain import ChainSite
from .flash import FlashSite
from .tilelayout import TileLayout


def operand_tiles(site, tile: dict, chunk: int) -> list[tuple[int, tuple[str, int], tuple[str, int]]]:
    """(operand, (its fragment or row axis, extent), (its k axis, extent)) of every tile a
    tensor-core site stages (codegen: MmaLowering, FlashLowering, ChainLowering), once each."""
    def whole(n: int, axis: str, size: int) -> tuple[str, int]:     # (padded: headpad.py)
        return axis, headpad.extent(site, n, axis, size)
    if isinstance(site, FlashSite):
        found = [(site.q, (site.row, tile[site.row]), whole(site.q, site.dk, site.head)),
                 (site.k, (site.red, chunk), whole(site.k, site.dk, site.head)),
                 (site.v, (site.dv, tile[site.dv]) if tile.get(site.dv, site.width) <
                  site.width else whole(site.v, site.dv, site.width), (site.red, chunk))
                 ][:3 if site.v is not None else 2]     # (no V: statistics alone)
    elif isinstance(site, ChainSite):
        found = [(sc.a, (site.row, tile[site.row]), whole(sc.a, sc.dk, sc.head))
                 for sc in site.scores]
        found += [(sc.b, (site.red, chunk), whole(sc.b, sc.dk, sc.head)) for sc in site.scores]
        found += [(p.c, whole(p.c, p.e, p.width), (site.red, chunk)) for p in site.outs]
        found += [(a.c, (site.row, tile[site.row]), whole(a.c, a.e, a.width))
                  for a in site.across]
    else:
        products = site.operands + tuple((a, b) for _, a, b in site.duals)   # (duals.py)
        found = [t for a, b in products for t in (        # (a sum's pairs: sums.py)
            (a, (site.row, tile[site.row]), (site.red, chunk)),
            (b, (site.col, tile[site.col]), (site.red, chunk)))]
    return list(dict.fromkeys(found))


def operand_layouts(g, site, tile: dict, chunk: int,
                    instruction: str = "mma.sync") -> tuple[tuple[int, TileLayout], ...]:
    """Each staged operand's layout: its inner axis is the one of the two later in the array
    (contiguous: the copy is coalesced), rows over the other; for wgmma, rows of a fragment
    axis longer than 64 values in blocks of 64 (TileLayout.block: what a descriptor reads)."""
    out = []
    for n, frag, k in operand_tiles(site, tile, chunk):
        axes = ir.type_of(g, n).axes
        inner, outer = (frag, k) if packing.position(axes, frag[0]) > axes.index(k[0]) \
            else (k, frag)
        block = wgmma.BLOCK if instruction == "wgmma" and inner is frag and \
            inner[1] > wgmma.BLOCK and not inner[1] % wgmma.BLOCK else 0
        out.append((n, tilelayout.layout(outer[1], inner[1], (outer[0], inner[0]), block)))
    for a in getattr(site, "across", ()):   # a chain's chunk values over its rows, staged as
        out.append((a.t, tilelayout.layout(tile[site.row], chunk, (site.row, site.red))))
    return tuple(dict.fromkeys(out))        # 16 bits for the products over the rows


__all__ = ["operand_tiles", "operand_layouts"]
