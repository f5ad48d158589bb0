"""A tensor-core product on Hopper's wgmma (sm_90a): the schedule's `instruction` "wgmma"
(compiler/wgmma.py says where).

The block is one or two warpgroups stacked along the rows (64 rows each); every warp holds
16 rows by all the block's N columns, N / 2 f32 accumulators a thread. The operand tiles
are staged exactly as mma.sync's (codegen/mma.py `_pipeline`: cp.async, `stages` deep, zeros
outside the arrays), in the planner's layouts, which wgmma reads through matrix descriptors
(compiler/wgmma_layout.py): every thread fences its landed copies for the async proxy
wgmma reads through (fence.proxy.async, before the chunk's barrier); per chunk each
warpgroup then fences its accumulator (wgmma.fence), issues one
`wgmma.mma_async.m64nNk16` per 16 of the chunk (A from its 64 rows, B the whole tile), commits
the group and waits for it before the chunk's stage can be refilled. The accumulator's layout
is mma.m16n8's fragment repeated every 8 columns (register 4j + i of a lane is fragment j's
element i), so the accumulator is declared as `acc[1][N / 8][4]` and the mma.sync epilogue
(`_epilogue_mma`: bias, activations, casts, masks of the arrays' ends) runs unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from ..compiler.wgmma import descriptors
from . import program as P
from .mma import FK, MmaLowering
from .wgmma_ptx import SWIZZLE, Variant

ALIGN = 1024     # the swizzle atom's period: every swizzled tile (and stage) starts there


class WgmmaLowering(MmaLowering):
    # the tiles are written through the generic proxy (cp.async, or stores), wgmma reads them
    # through the async proxy: each writer fences after its copies land (PTX ISA, "Async Proxy")
    LANDED = "napkin_wgmma_proxy_fence"

    def __init__(self, plan, kp, names: dict, sizes: dict[str, str], index_type: str):
        super().__init__(plan, kp, names, sizes, index_type)
        s = self.site
        self.desc = dict(zip((s.a, s.b), descriptors(self.g, s, dict(kp.schedule.layouts))))
        a, b = self.desc[s.a], self.desc[s.b]
        self.variant = Variant(self.wtn, s.dtype, a.mn_major, b.mn_major)

    def _warps(self) -> tuple[int, int, int, int]:
        """(warps along rows, along columns, warp tile rows, columns): the schedule's warps
        count warpgroups (compiler/wgmma.py), each 4 warps of 16 rows."""
        groups, _, _, n = self.kp.schedule.warp_layout()
        return 4 * groups, 1, 16, n

    def build(self, name: str) -> P.KernelProgram:
        return replace(super().build(name), wgmma=(self.variant,))

    def _block_body(self) -> None:
        b, s = self.b, self.site
        self._origins()
        n = self.wtn
        b.emit(P.Decl("float", "acc", "{}", shape=(1, n // 8, 4)))
        b.emit(P.Decl("auto&", "accw", f"*reinterpret_cast<float (*)[{n // 2}]>(&acc[0][0][0])"))
        k = self.chunked(s.red)
        tiles = [self._tile(s.a, self.grouped(s.row), k), self._tile(s.b, self.grouped(s.col), k)]
        first = tiles[0]["count"] * tiles[0]["stages"] * 2
        # the tiles are the block's first buffers: A at 0, B right after it, both on ALIGN
        assert [t.offset for t in self.smem[:1]] == ["0"] and first % ALIGN == 0, \
            (self.smem, first)

        def pipeline(vector: bool | None = None):
            self._pipeline(tiles, lambda tail: self._chunk(tiles), vector=vector)
        tests = sorted({a for a in map(self._aligned, tiles) if isinstance(a, str)})
        if tests:
            b.emit(P.If(" && ".join(tests), self._scoped(lambda: pipeline(True)),
                        self._scoped(lambda: pipeline(False))))
        else:
            pipeline()
        self._epilogue_mma(1, n // 8)

    def _chunk(self, tiles) -> None:
        """The chunk in the current stage: each warpgroup fences, issues one mma_async per 16
        of the chunk, commits and waits (the stage is refilled after the next barrier)."""
        b = self.b
        ta, tb = tiles
        da, db = self.desc[self.site.a], self.desc[self.site.b]
        rows = f" + (wr / 4) * {da.rows64}" if self.wm > 4 else ""
        start_a = f"reinterpret_cast<const unsigned char*>({self.at(ta)}){rows}"
        start_b = f"reinterpret_cast<const unsigned char*>({self.at(tb)})"
        b.emit(P.Call("napkin_wgmma_fence", ()))

        def step():
            b.emit(P.Decl("const unsigned long long", "da", f"napkin_wgmma_desc({start_a} + kk * "
                          f"{da.step}, {da.lbo}, {da.sbo}, {SWIZZLE[da.swizzle]})"))
            b.emit(P.Decl("const unsigned long long", "db", f"napkin_wgmma_desc({start_b} + kk * "
                          f"{db.step}, {db.lbo}, {db.sbo}, {SWIZZLE[db.swizzle]})"))
            b.emit(P.Call(self.variant.name, ("accw", "da", "db", "1")))
        b.loop("kk", "0", str(self.kp.schedule.stream[1] // FK), "1", step, unroll=True)
        b.emit(P.Call("napkin_wgmma_commit", ()))
        b.emit(P.Call("napkin_wgmma_wait<0>", ()))
