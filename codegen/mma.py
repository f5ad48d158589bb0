"""A tensor-core kernel: the contraction on mma.sync.m16n8k16, the epilogue per fragment element.

The plan's `warps` (compiler/tensorcore.py) split the block's `BM x BN` tile into `wm x wn` warp
tiles of `FM x FN` fragments (16 x 8 each). Per chunk of `BK` along the contracted axis, the block
copies both operands' tiles into shared memory (in the layout the schedule gives each,
compiler/tilelayout.py: XOR-swizzled or padded rows, so that ldmatrix's eight row addresses fall in
different banks; positions outside the arrays are zeros, which add nothing), then each warp, per 16
of the chunk, loads its A fragments (`ldmatrix.x4`) and B fragments (`ldmatrix.x2`), transposed
when the operand's contiguous axis is not the contracted one, and issues `FM x FN` mmas into f32
accumulators. After the last chunk each lane holds, per fragment, rows `g` and `g + 8` and columns
`2q, 2q + 1` of C (g = lane / 4, q = lane % 4, the PTX ISA's C layout); the scalar emitter computes
the rest of the kernel (bias, activation, masks, the cast) at each of those points and stores the
ones inside the arrays. A sum of products (compiler/sums.py) runs each pair's chunk loop after the
last one's, into the same accumulators.
"""

from __future__ import annotations

from ..compiler import ir
from ..compiler import tensorcore as tc
from . import cexpr
from . import program as P
from .builder import Ix
from .column_stats import ColumnStats
from .computed import ComputedTiles
from .fragment_loads import FragmentLoads
from .kernel import KernelLowering
from .packed import PackedRows
from .rowstats import RowStats
from .tiles import SharedTiles

FM, FN, FK = tc.FRAGMENT


class MmaLowering(FragmentLoads, PackedRows, RowStats, ColumnStats, ComputedTiles, SharedTiles,
                  KernelLowering):
    #: called by every thread after its copies of a chunk land, before the barrier (None:
    #: nothing; wgmma.py: the proxy fence its async-proxy reads need)
    LANDED: str | None = None
    #: which full chunks the body being emitted masks per score: None, both (a test per
    #: chunk); True, the chunks the mask holds everywhere in (no mask); False, the others
    inside: bool | None = None

    def whole_chunk(self, chunk: int) -> str | None:
        """C test that the full chunk at c0 lies where the mask holds everywhere (no mask per
        score there), or None: no such chunks (a lowering with a mask per score says)."""
        return None

    def __init__(self, plan, kp, names: dict, sizes: dict[str, str], index_type: str):
        super().__init__(plan, kp, names, sizes, index_type)
        self.site = kp.schedule.site   # compiler/tensorcore.py: what runs on the tensor cores
        self.staging = set()       # the operands get their own tiles (tiles.py); others: global
        self.values: dict = {}     # node -> the fragment element it is at the current point
        self.rows: dict = {}       # node -> its row vector (_row_vectors)
        self.row_scope: dict | None = None   # the point the row vectors are registered at
        self.vectored: dict | None = None    # a run of 8 positions being computed (computed._vectored)
        self.wm, self.wn, self.wtm, self.wtn = self._warps()

    def _warps(self) -> tuple[int, int, int, int]:
        """(warps along rows, along columns, warp tile rows, warp tile columns)."""
        return self.kp.schedule.warp_layout()

    def registered(self, n: int, scope: dict[str, Ix]):
        value = self.values.get(n)
        if value is not None and n in self.rows and self.row_scope is not None and any(
                scope.get(a) != self.row_scope.get(a) for a in ir.type_of(self.g, n).axes):
            return None    # a row vector holds n at the fragment's row, not where a view of
                           # n reads it (the dK/dV chain's doc[q] beside doc[x] of its rows)
        return value

    def _rows_at(self, scope: dict, slot: str) -> None:
        """Register the row vectors at the element of `scope` (their slot index `slot`)."""
        self.row_scope = scope
        self.values.update((n, f"{name}[i0][{slot} / 2]") for n, name in self.rows.items())

    def build(self, name: str) -> P.KernelProgram:
        b = self.b
        b.emit(P.Decl("const int", "tid", "(int)threadIdx.x"))
        b.emit(P.Decl("const int", "lane", "tid % 32"))
        b.emit(P.Decl("const int", "wr", f"(tid / 32) / {self.wn}" if self.wn > 1 else "tid / 32"))
        if self.wn > 1:
            b.emit(P.Decl("const int", "wc", f"(tid / 32) % {self.wn}"))
        b.emit(P.Decl("const int", "fg", "lane / 4"))
        b.emit(P.Decl("const int", "fq", "lane % 4"))
        b.hoist_here(("tid", "lane", "wr", "wc", "fg", "fq"))
        return self._grid(name)

    def _warp_col(self) -> str:
        """This warp's first column of the block tile (one warp across: 0)."""
        return f"wc * {self.wtn}" if self.wn > 1 else "0"

    # -- one block ---------------------------------------------------------------------------
    def _block_body(self) -> None:
        b, s = self.b, self.site
        self._origins()
        fm, fn = self.wtm // FM, self.wtn // FN
        b.emit(P.Decl("float", "acc", "{}", shape=(fm, fn, 4)))
        for j in range(1, len(s.duals) + 1):   # (products with accumulators of their own)
            b.emit(P.Decl("float", f"acc{j}", "{}", shape=(fm, fn, 4)))
        k = self.chunked(s.red)
        # a sum of products (compiler/sums.py): each pair's tiles, its chunk loop after the
        # last one's, into the same accumulators; products sharing the chunk loop
        # (compiler/duals.py): one loop over every distinct operand's tile
        pairs = [[self._tile(a, self.grouped(s.row), k), self._tile(c, self.grouped(s.col), k)]
                 for a, c in s.operands] if not s.duals else [self._dual_tiles(k)]
        stats = self._stats_declare()
        chunk = self.kp.schedule.stream[1]

        def pipeline(vector: bool | None = None):
            for tiles in pairs:
                def compute(tail, tiles=tiles):
                    self._stats_fold(stats, chunk, vector)
                    b.loop("kk", "0", str(chunk // FK), "1", lambda: self._step(
                        tiles, fm, fn), unroll=True)
                if len(pairs) == 1:
                    self._pipeline(tiles, compute, vector=vector)
                else:       # (each pair's loop its own scope: its stage and fill counters)
                    b.emit(P.Block(self._scoped(
                        lambda tiles=tiles, compute=compute: self._pipeline(
                            tiles, compute, vector=vector))))
        # rows whose length is a runtime size: the size test decides once, outside the chunk
        # loop, which of two loops runs (16-byte copies, or one value at a time)
        tiles = [t for ts in pairs for t in ts]
        tests = sorted({a for a in [*map(self._aligned, tiles), *(t.vector for t in stats)]
                        if isinstance(a, str)})
        if tests:
            b.emit(P.If(" && ".join(tests), self._scoped(lambda: pipeline(True)),
                        self._scoped(lambda: pipeline(False))))
        else:
            pipeline()
        self._stats_finish(stats)
        if getattr(s, "columns", ()):       # row statistics over the columns (column_stats.py)
            self._columns_epilogue(fm, fn)
            return
        self._epilogue_mma(fm, fn, stats)

    def _pipeline(self, tiles, compute, skip=None, peel: bool = False,
                  vector: bool | None = None, span: tuple[str, str] | None = None) -> None:
        """The chunk loop, `S` = the schedule's `stages` deep (compiler/occupancy.stages), one
        barrier per chunk. Before the loop the first S - 1 chunks' copies are issued, one
        cp.async group each; chunk c waits until all but the S - 2 most recent groups have
        landed (its own among them), then the barrier makes every thread's copies visible and
        says every warp is done with the stage chunk c - 1 used, which the copies of chunk
        c + S - 1 then fill while the block computes on chunk c (one group per chunk,
        committed even when empty, so that the count is exact; `LANDED`, where a lowering
        sets it, runs between the wait and the barrier). A barrier before the first
        copies keeps them from overwriting what the block's previous tile still reads. A
        chunk the mask hides (`skip(start, length)`: the C test that the chunk at `start` of
        `length` is hidden, or None) is neither copied nor computed: the prefetch tests its
        chunk, the compute the current one.
        `vector` (True/False) fixes the copies' width where a size test chose it outside.

        `compute(tail)` emits the work on one chunk; `tail` says the chunk may be partial.
        With `peel`, the loop runs over the full chunks only (`clen` is the chunk, so no
        per-element bounds test) and a partial last chunk runs once after it. `span`: C
        names of the first chunk's start and the end of the chunks to run (masks.data_span:
        a chunk-aligned start, an end that is a chunk multiple or the axis's size); else
        every chunk of the axis."""
        b, r = self.b, self.site.red
        chunk, size = self.kp.schedule.stream[1], f"({self.itype})({self.sizes[r]})"
        start0, end = span if span is not None else (f"({self.itype})0", size)
        depth = self.kp.schedule.stages
        ahead = (depth - 1) * chunk         # how far ahead of the current chunk the copies run
        fill = "(stage ^ 1)" if depth == 2 else "fill"   # the stage the copies fill

        def length(start: str) -> str:
            left = f"{size} - ({start})"
            return f"(int)({left} < {chunk} ? {left} : {chunk})"

        def hidden(start: str, count: str):
            return skip(start, count) if skip is not None else None

        def copies(stage: str, start: str, count: str):
            test = hidden(start, count)

            def each():
                for t in tiles:
                    self._copy(t, stage, start, count, vector)
            if test is None:
                each()
            else:
                b.emit(P.If(f"!({test})", self._scoped(each)))

        def first():
            b.emit(P.Barrier())     # the previous tile's readers are done with every stage
            b.emit(P.Decl("const int", "nlen", length(start0)))
            if span is None:
                copies("0", start0, "nlen")
            else:
                b.emit(P.If(f"{start0} < {end}", self._scoped(lambda: copies("0", start0, "nlen"))))
        b.emit(P.Block(self._scoped(first)))
        b.emit(P.Call("napkin_cp_async_commit", ()))
        for i in range(1, depth - 1):       # the other chunks ahead of the first
            at = f"{start0} + {i * chunk}"

            def more(i=i, at=at):
                b.emit(P.Decl("const int", "nlen", length(at)))
                copies(str(i), at, "nlen")
            b.emit(P.If(f"{at} < {end}", self._scoped(more)))
            b.emit(P.Call("napkin_cp_async_commit", ()))
        b.emit(P.Decl("int", "stage", "0"))
        if depth > 2:
            b.emit(P.Decl("int", "fill", str(depth - 1)))

        def body(tail: bool):
            b.emit(P.Decl("const int", "clen", length("c0") if tail else str(chunk)))

            def prefetch():
                b.emit(P.Decl("const int", "nlen", length(f"c0 + {ahead}")))
                copies(fill, f"c0 + {ahead}", "nlen")
            b.emit(P.Call(f"napkin_cp_async_wait<{depth - 2}>", ()))
            if self.LANDED:
                b.emit(P.Call(self.LANDED, ()))
            b.emit(P.Barrier())
            b.emit(P.If(f"c0 + {ahead} < {end}", self._scoped(prefetch)))
            b.emit(P.Call("napkin_cp_async_commit", ()))
            test = hidden("c0", "clen")
            if test is None:
                compute(tail)
            else:
                b.emit(P.If(f"!({test})", self._scoped(lambda: compute(tail))))
            if depth == 2:
                b.emit(P.Set("stage", "stage ^ 1"))
            else:
                b.emit(P.Set("fill", "stage"))      # chunk c's stage: the next chunks' copies
                b.emit(P.Set("stage", f"(stage == {depth - 1} ? 0 : stage + 1)"))
        if not peel:
            b.loop("c0", start0, end, str(chunk), lambda: body(True), ctype=self.itype)
            return
        b.emit(P.Decl(f"const {self.itype}", "cfull", f"{end} / {chunk} * {chunk}"))
        whole = self.whole_chunk(chunk)
        if whole is None:
            b.loop("c0", start0, "cfull", str(chunk), lambda: body(False), ctype=self.itype)
        else:       # the chunks the mask holds everywhere in, a loop of their own (unmasked)
            def masked_after_run():
                self.inside = True
                run = self._scoped(lambda: body(False))
                b.emit(P.For("c0", "", f"c0 < cfull && ({whole})", f"c0 += {chunk}", run))
                self.inside = False
                b.emit(P.If("c0 < cfull", self._scoped(lambda: body(False))))
                self.inside = None
            b.loop("c0", start0, "cfull", str(chunk), masked_after_run, ctype=self.itype)

        def last():
            b.emit(P.Decl(f"const {self.itype}", "c0", "cfull"))
            body(True)
        b.emit(P.If(f"cfull < {end}" if span is None else f"cfull < {end} && {start0} < {end}",
                    self._scoped(last)))

    def _dual_tiles(self, k) -> list[dict]:
        """Every distinct operand's tile of products sharing the chunk loop (duals.py): an A
        over the rows, a B over the columns, each staged once; `self.products`: (the
        accumulator, its A tile, its B tile) of each product, the first's `acc`."""
        s, tiles = self.site, {}
        for n, side in ((n, side) for _, a, c in self._products() for n, side in
                        ((a, s.row), (c, s.col))):
            if n not in tiles:
                tiles[n] = self._tile(n, self.grouped(side), k)
        self.products = [("acc" if j == 0 else f"acc{j}", tiles[a], tiles[c])
                         for j, (_, a, c) in enumerate(self._products())]
        return list(tiles.values())

    def _products(self) -> tuple:
        """(node, A, B) of every product with accumulators of its own, the site's first."""
        s = self.site
        return ((s.node, s.a, s.b),) + tuple(getattr(s, "duals", ()))

    def _step(self, tiles, fm: int, fn: int) -> None:
        """16 of the chunk: every warp loads its fragments and multiplies them (products
        sharing the loop, duals.py: each distinct operand's fragments once, `fa`, `fa1`..,
        `fb`, `fb1`.., and each product's mmas into its accumulators)."""
        b = self.b
        products = self.products if getattr(self.site, "duals", ()) else [("acc", *tiles)]
        fa, fb = {}, {}
        for _, ta, tb in products:
            for seen, t, name in ((fa, ta, "fa"), (fb, tb, "fb")):
                seen.setdefault(t["node"], (f"{name}{len(seen) or ''}", t))
        for name, _ in fa.values():
            b.emit(P.Decl("unsigned", name, shape=(fm, 4)))
        for name, _ in fb.values():
            b.emit(P.Decl("unsigned", name, shape=(fn, 2)))
        for name, ta in fa.values():
            self._each([("i0", fm)], lambda name=name, ta=ta: self._ldmatrix(
                ta, f"{name}[i0]", f"wr * {self.wtm} + i0 * {FM}", "kk * 16", 4))
        for name, tb in fb.values():
            self._b_fragments(tb, fn, lambda i, name=name: f"{name}[{i}]",
                              lambda i: f"{self._warp_col()} + {i} * {FN}",
                              lambda i: "kk * 16", "i1")
        mma = f"napkin_mma_m16n8k16_{self.site.dtype}"
        for acc, ta, tb in products:
            a, c = fa[ta["node"]][0], fb[tb["node"]][0]
            self._each([("i0", fm), ("i1", fn)], lambda acc=acc, a=a, c=c: b.emit(
                P.Call(mma, (f"{acc}[i0][i1]", f"{a}[i0]", f"{c}[i1]", f"{acc}[i0][i1]"))))

    # -- epilogue ----------------------------------------------------------------------------
    def _epilogue_mma(self, fm: int, fn: int, stats=()) -> None:
        """Every accumulator element of the lane: its point, the stores of the kernel there
        (`stats`: the reductions beside the product, read at the element's row or column)."""
        s = self.site
        local = {s.row: f"wr * {self.wtm} + i0 * {FM} + fg + (i2 / 2) * 8",
                 s.col: f"{self._warp_col()} + i1 * {FN} + fq * 2 + i2 % 2"}

        def point():
            scope, valid = self._point({a: f"{self._axis_var('org', a)} + {v}"
                                        for a, v in local.items()})
            self.values[s.node] = "acc[i0][i1][i2]"
            # a sum's further products are in acc too: each reaches the stores only through
            # additions beside the first (compiler/sums.py), so each adds 0 there
            self.values.update((n, "0.0f") for n, _, _ in s.pairs)
            # products with accumulators of their own (compiler/duals.py): each its own
            self.values.update((n, f"acc{j}[i0][i1][i2]")
                               for j, (n, _, _) in enumerate(getattr(s, "duals", ()), 1))
            self._stats_at(stats, local)
            for n in self.k.stores:
                self._store(n, scope, {"valid": valid})
            self.values.clear()
        self._each([("i0", fm), ("i1", fn), ("i2", 4)], point)

    def _row(self, slot: str = "i2") -> str:
        """The block-wide row (C) of a lane's fragment slot `slot` of fragment i0 (slots 0, 1:
        row fg; 2, 3: fg + 8)."""
        return (f"{self._axis_var('org', self.site.row)} + wr * {self.wtm} + i0 * {FM} + fg + "
                f"({slot} / 2) * 8")

    def _row_vectors(self, fm: int) -> dict[int, str]:
        """Values over the fragment rows and batch axes only that the kernel loads (a saved
        logsumexp, D) or reads at renamed positions of a load (varlen's doc[q]): read once per
        lane and row into registers before the chunks, not at every element of every chunk
        (at each lane's row: `_row`)."""
        s = self.site
        rows = set(s.row_axes)
        keep = {*rows, *s.batch}
        found = [n for n in self.k.loads] + [
            n for n in self.k.nodes if isinstance(ir.op(self.g, n), ir.View)
            and ir.operands(self.g, n)[0] in self.k.loads]
        out: dict[int, str] = {}
        for n in found:
            axes = set(ir.type_of(self.g, n).axes)
            if not axes & rows or not axes <= keep:
                continue
            name = out[n] = f"rv{len(out)}"
            kind = ir.kind_of_dtype(ir.type_of(self.g, n).dtype)
            self.b.emit(P.Decl(cexpr.CKIND[kind], name, shape=(fm, 2)))

            def fill(n=n, name=name):
                scope, _ = self._point({s.row: self._row("(2 * i5)")})
                self.b.emit(P.Set(f"{name}[i0][i5]", self.emitter.value(n, scope)))
            self._each([("i0", fm), ("i5", 2)], fill)
        return out

    def _point(self, raws: dict, row: str | None = None) -> tuple[dict, str]:
        """A fragment element's scope (indices clamped inside the arrays) and in-range test,
        from the raw index of each fragment axis; batch axes at the block's position. `row`:
        the fragment rows' index is the lane's row at that slot of fragment i0 (`_row`)."""
        scope, checks = self._checked_point(raws, row)
        return scope, " && ".join(checks.values())

    def _checked_point(self, raws: dict, row: str | None = None) -> tuple[dict, dict]:
        """_point's scope, and its in-range test of each axis apart. A lane's packed row
        (`row` given, `_lane_rows` declared) reads its clamped index and (r, q) from the
        lane's tables instead of dividing here."""
        held = self.lane_rows if row is not None else {}
        if row is not None:
            raws = {self.site.row: self._row(row), **raws}
        scope, checks = {a: Ix(self._axis_var("org", a)) for a in self.site.batch}, {}
        for a, raw in raws.items():
            if a in held:
                scope[a] = Ix(f"{held[a]}[i0][{row} / 2]")
                checks[a] = f"({raw} < {self.sizes[a]})"
                continue
            v = self.b.value(self.itype, raw, "pt")
            top = f"({self.itype})({self.sizes[a]} - 1)"
            scope[a] = Ix(f"({v} < {top} ? {v} : {top})")
            checks[a] = f"({v} < {self.sizes[a]})"
        if held:
            scope.update((a, Ix(f"{name}[i0][{row} / 2]")) for a, name in held.items())
            return scope, checks
        return self.unpacked(scope), checks

    def _each(self, loops, body) -> None:
        """Nested unrolled loops over static trip counts (fragment indices)."""
        if not loops:
            body()
            return
        (var, trips), rest = loops[0], loops[1:]
        self.b.loop(var, "0", str(trips), "1", lambda: self._each(rest, body), unroll=True)
