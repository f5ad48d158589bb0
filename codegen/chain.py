"""A chain of products on tensor cores: scores of a chunk feeding products over it (compiler/chain.py).

Per block: the stationary operands' tiles (the block's rows) are copied to shared memory
once. Per chunk of `BC` positions of the streamed axis, every streamed operand is staged
once (swizzled or padded rows: compiler/tilelayout.py; zeros outside; an array both a score's B and an output's C is one tile
read both ways), each warp computes every score tile as C fragments (`FM x BC/8` mmas per
16 of its contracted axis, the A fragments by ldmatrix.x4 from the stationary tile), and
then, per output and per 16 of the chunk, the scalar emitter evaluates the output's chunk
value at the 8 elements a lane holds of two 8-wide C tiles (0 past the streamed axis's
end in a partial chunk: a zero-filled row of C times an infinity would be NaN), packs them
to 16 bits as an A fragment, and multiplies it with C's B fragments (`ldmatrix.x2`,
transposed when C is contiguous along its own axis) into the output's f32 accumulators.
Arrays over the rows only (a saved logsumexp, D) are read into registers once, before the
chunks; 4-byte arrays over the streamed axis only (the same ones in the dK/dV kernel, which
streams the queries) are staged per chunk beside the tiles and read from shared memory. A chunk in which the diagram's mask zeroes every output's chunk value (compiler/masking.
zero_unless: causal attention's backward above the diagonal) is neither copied nor
computed. After the last chunk the emitter computes the rest of the kernel at every accumulator
element and stores it.
"""

from __future__ import annotations

from ..compiler import headpad, ir
from . import chain_sums, masks
from . import cexpr
from . import program as P
from . import staging
from .builder import Ix
from .mma import FK, FM, FN, MmaLowering
from .tiles import TileAxis, offset


class ChainLowering(MmaLowering):
    def _block_body(self) -> None:
        b, s = self.b, self.site
        self._origins()
        fm = self.wtm // FM
        stationary = {}
        for sc in s.scores:
            if sc.a not in stationary:
                stationary[sc.a] = self._tile(sc.a, self.grouped(s.row), self.whole(sc.dk, sc.head, sc.a))
        for a in s.across:           # the loaded operands of the products over the rows
            if a.c not in stationary:
                stationary[a.c] = self._tile(a.c, self.grouped(s.row), self.whole(a.e, a.width, a.c))
        staged = {a.node: self._stage_tile(a) for a in s.across}
        b.emit(P.Barrier())          # the previous tile's readers are done with shared memory
        for t in stationary.values():
            self._copy(t)
        b.emit(P.Call("napkin_cp_async_wait_all", ()))
        b.emit(P.Barrier())
        streamed: dict[int, dict] = {}
        for sc in s.scores:
            if sc.b not in streamed:
                streamed[sc.b] = self._tile(sc.b, self.chunked(s.red), self.whole(sc.dk, sc.head, sc.b))
        for p in s.outs:
            if p.c not in streamed:
                streamed[p.c] = self._tile(p.c, self.whole(p.e, p.width, p.c), self.chunked(s.red))
        self.columns = {n: self._vector(n, s.red) for n in self._column_vectors()}
        for i, p in enumerate(s.outs):
            b.emit(P.Decl("float", f"acc{i}", "{}", shape=(fm, self._cover(p.node, p.e, p.width) // FN, 4)))
        chain_sums.declare(self, fm)
        self.rows = self._row_vectors(fm)
        chunk = self.kp.schedule.stream[1]

        def compute(tail: bool):
            for j, sc in enumerate(s.scores):
                self._score(j, sc, stationary[sc.a], dict(streamed[sc.b], k=sc.dk), fm, chunk)
            for i, p in enumerate(s.outs):
                # (the stored sums at the first output's elements: chain_sums.py)
                self._output(i, p, dict(streamed[p.c], k=s.red), fm, chunk, tail,
                             chain_sums.adder(self, tail) if i == 0 and s.sums else None)
            for a in s.across:
                self._across(a, staged[a.node], dict(stationary[a.c], k=s.row), fm, chunk, tail)
        # a chunk the diagram's mask zeroes for every output is neither copied nor computed
        # (a stored sum's value: its innermost sum's operand, linear in it: chain_sums.py)
        outs = [p.node for p in s.outs] + [a.node for a in s.across] + [
            (m.inner or (m.node,))[-1] for m in s.sums]
        kinds = {n: "contract" for n in outs}
        span = masks.chunk_span(self, outs, kinds, self.wm * self.wn * 32, s.red, s.batch)
        known = {"#data": span.bounds} if span else {}

        def skip(start: str, length: str):
            return masks.skip_test(self, outs, kinds,
                                   dict(self._box(s.red, start, length), **known))
        self._pipeline(list(streamed.values()) + list(self.columns.values()), compute,
                       None if span and span.band else skip, peel=True,
                       span=(span.first, span.end) if span else None)
        self._finish(fm)
        chain_sums.finish(self, fm)

    def _score(self, j: int, sc, ta: dict, tb: dict, fm: int, chunk: int) -> None:
        """S_j = A_j B_j over its contracted axis: C fragments of the chunk."""
        b = self.b
        name = f"sc{j}"
        b.emit(P.Decl("float", name, "{}", shape=(fm, chunk // FN, 4)))

        def step():
            b.emit(P.Decl("unsigned", "fa", shape=(4,)))
            self._ldmatrix(ta, "fa", f"wr * {self.wtm} + i0 * {FM}", "i2 * 16", 4)

            b.emit(P.Decl("unsigned", "fb", shape=(2, 2)))
            self._b_fragments(tb, chunk // FN, lambda i: f"fb[{i} % 2]", lambda i: f"{i} * {FN}",
                              lambda i: "i2 * 16", "i1",
                              body=lambda i: b.emit(P.Call(self._mma(), (
                                  f"{name}[i0][{i}]", "fa", f"fb[{i} % 2]", f"{name}[i0][{i}]"))))
        self._each([("i0", fm), ("i2", self._cover(sc.node, sc.dk, sc.head) // FK)], step)

    def _chunk_value(self, node: int, t: int, tail: bool, rows: bool = False, then=None
                     ) -> None:
        """`tv[2][4]`: chunk value t (of product `node`) at the lane's elements of two 8-wide
        C tiles (fragment i0, 16 of the chunk i1): 0 past the streamed axis's end in a
        partial chunk (and, with `rows`, past the rows' end: a product over the rows).
        `then(scope, checks, key)` emits more at each element, the same values in scope
        (the stored sums: chain_sums.adder)."""
        b, s = self.b, self.site
        b.emit(P.Decl("float", "tv", shape=(2, 4)))

        def element():
            key = f"(2 * i1 + i3) * {FN} + fq * 2 + i4 % 2"
            scope, checks = self._checked_point({s.red: f"c0 + {key}"}, row="i4")
            for j, sc in enumerate(s.scores):
                self.values[sc.node] = f"sc{j}[i0][2 * i1 + i3][i4]"
            self._rows_at(scope, "i4")
            self.values.update((n, f"{self.at(t)}[{key}]") for n, t in self.columns.items())
            self.line(node)
            self.emitter.fast = cexpr.FAST      # (T_i is rounded to 16 bits for the mma)
            value = self.emitter.value(t, scope)
            tests = ([f"{key} < clen"] if tail else []) + ([checks[s.row]] if rows else [])
            b.emit(P.Set("tv[i3][i4]", f"({' && '.join(tests)}) ? {value} : 0.0f" if tests
                         else value))
            if then is not None:
                then(scope, checks, key)
            self.emitter.fast = {}
            self.values.clear()
        self._each([("i3", 2), ("i4", 4)], element)

    def _output(self, i: int, p, tc: dict, fm: int, chunk: int, tail: bool, then=None
                ) -> None:
        """O_i += T_i C_i: T_i at the lane's elements of each 16 of the chunk, packed
        (`then`: _chunk_value's)."""
        b, s = self.b, self.site
        pack = "napkin_pack_half2" if s.dtype == "f16" else "napkin_pack_bf162"

        def ktile():
            self._chunk_value(p.node, p.t, tail, then=then)
            parts = [f"{pack}(tv[{t}][{2 * h}], tv[{t}][{2 * h + 1}])" for t in (0, 1) for h in (0, 1)]
            b.emit(P.Decl("unsigned", "pa", shape=(4,), init="{" + ", ".join(parts) + "}"))

            b.emit(P.Decl("unsigned", "fb", shape=(2, 2)))
            self._b_fragments(tc, self._cover(p.node, p.e, p.width) // FN, lambda j: f"fb[{j} % 2]", lambda j: f"{j} * {FN}",
                              lambda j: "i1 * 16", "i2",
                              body=lambda j: b.emit(P.Call(self._mma(), (
                                  f"acc{i}[i0][{j}]", "pa", f"fb[{j} % 2]", f"acc{i}[i0][{j}]"))))
        self._each([("i0", fm), ("i1", chunk // FK)], ktile)

    def _stage_tile(self, a) -> dict:
        """The shared tile of a product over the rows' chunk values: [rows][chunk] 16-bit
        values in the schedule's layout, one stage (written and read within the chunk)."""
        s = self.site
        layout = self.kp.schedule.layout(a.t, (s.row, s.red))
        ctype = cexpr.CTYPE[s.dtype]
        name = f"sm{len(self.smem)}"
        self.smem.append(P.SharedBuffer(name, ctype, staging.next_offset(self.smem),
                                        str(layout.count)))
        self.smem_terms.append((layout.count * 2,))
        self.b.emit(P.Decl(f"{ctype}* const", name, f"reinterpret_cast<{ctype}*>(smem + "
                           f"{self.smem[-1].offset})"))
        return {"node": a.t, "name": name, "inner": TileAxis(s.red, layout.inner, None, None),
                "outer": TileAxis(s.row, layout.outer, None, None), "k": s.row, "layout": layout,
                "count": layout.count, "stages": 1, "ctype": ctype}

    def _across(self, a, ts: dict, tc: dict, fm: int, chunk: int, tail: bool) -> None:
        """U += T^T L over the block's rows for this chunk (chain.Across): each warp packs its
        rows of T into the shared tile; after a barrier the warps share the chunk's 16 x 8
        tiles of U (tile w, w + warps, ...), each over all the block's rows (ldmatrix.trans
        of T and of L's stationary tile), and add them into the f32 scratch with atomics."""
        b, s = self.b, self.site
        pack = "napkin_pack_half2" if s.dtype == "f16" else "napkin_pack_bf162"
        layout = ts["layout"]

        def ktile():
            self._chunk_value(a.node, a.t, tail, rows=True)
            for t in (0, 1):
                for h in (0, 1):
                    row = f"wr * {self.wtm} + i0 * {FM} + fg + {h * 8}"
                    col = f"(2 * i1 + {t}) * {FN} + fq * 2"
                    b.emit(P.Set(f"*reinterpret_cast<unsigned*>(&{ts['name']}["
                                 f"{offset(layout, row, col)}])",
                                 f"{pack}(tv[{t}][{2 * h}], tv[{t}][{2 * h + 1}])"))
        self._each([("i0", fm), ("i1", chunk // FK)], ktile)
        b.emit(P.Barrier())          # every warp's rows of T are in the tile
        cols = self._cover(a.node, a.e, a.width) // FN     # (padded: compiler/headpad.py)
        tiles = chunk // FM * cols
        each = -(-tiles // self.wm)
        param, _ = self.names[a.store]
        axes = ir.type_of(self.g, a.store).axes
        layout_u = self.global_layout(a.store, axes)

        def tile():
            b.emit(P.Decl("const int", "ut", f"wr + {self.wm} * j0"))

            def work():
                b.emit(P.Decl("const int", "um", f"(ut / {cols}) * {FM}"))
                b.emit(P.Decl("const int", "un", f"(ut % {cols}) * {FN}"))
                b.emit(P.Decl("float", "ua", "{}", shape=(4,)))

                def step():
                    b.emit(P.Decl("unsigned", "fa", shape=(4,)))
                    self._ldmatrix(ts, "fa", "um", "kk * 16", 4)
                    b.emit(P.Decl("unsigned", "fb", shape=(2,)))
                    self._ldmatrix(tc, "fb", "un", "kk * 16", 2)
                    b.emit(P.Call(self._mma(), ("ua", "fa", "fb", "ua")))
                b.loop("kk", "0", str(self.wm * self.wtm // FK), "1", step, unroll=True)

                def add():      # (e is static: the chunk's tail tested, and the columns
                    at = b.value(self.itype, "c0 + um + fg + (i2 / 2) * 8", "pt")   # past a
                    col = "un + fq * 2 + i2 % 2"                    # padded head's: headpad.py)
                    scope = {x: Ix(self._axis_var("org", x)) for x in s.batch}
                    scope.update({s.red: Ix(at), a.e: Ix(col)})
                    test = f"{at} < {self.sizes[s.red]}" + (
                        f" && {col} < {a.width}" if cols * FN > a.width else "")
                    b.emit(P.If(test, (P.Call("atomicAdd", (
                        f"&{param}[{layout_u.offset(scope)}]", "ua[i2]")),)))
                self._each([("i2", 4)], add)
            if tiles % self.wm:
                b.emit(P.If(f"ut < {tiles}", self._scoped(work)))
            else:
                work()
        self._each([("j0", each)], tile)

    def _column_vectors(self) -> list[int]:
        """The loads over the streamed axis and batch axes only, of 4-byte values, that the
        kernel reads as they are (no view or gather of them, no split window): staged per
        chunk (`MmaLowering._vector`)."""
        s = self.site
        keep = {s.red, *s.batch}
        out = []
        for n in self.k.loads:
            axes = ir.type_of(self.g, n).axes
            if s.red not in axes or not set(axes) <= keep or self._source(n)[1] is not None:
                continue
            if self.names[n][1] not in ("f32", "i32"):
                continue
            if any(isinstance(ir.op(self.g, m), (ir.View, ir.Gather))
                   for m in self.g.successors(n) if m in self.k.nodes):
                continue
            out.append(n)
        return out

    def _finish(self, fm: int) -> None:
        """Every accumulator element of the lane: the stores over its output's axis there."""
        s = self.site
        for e in dict.fromkeys(p.e for p in s.outs):
            outs = [(i, p) for i, p in enumerate(s.outs) if p.e == e]
            width = self._cover(outs[0][1].node, e, outs[0][1].width)
            added = {a.store for a in s.across + s.sums}    # (added with atomics)
            stores = [n for n in self.k.stores
                      if e in ir.type_of(self.g, n).axes and n not in added]

            def point():
                scope, valid = self._point({e: f"i1 * {FN} + fq * 2 + i2 % 2"}, row="i2")
                for i, p in outs:
                    self.values[p.node] = f"acc{i}[i0][i1][i2]"
                self._rows_at(scope, "i2")
                for n in stores:
                    self._store(n, scope, {"valid": valid})
                self.values.clear()
            self._each([("i0", fm), ("i1", width // FN), ("i2", 4)], point)

    def _cover(self, node: int, axis: str, size: int) -> int:
        """What product `node`'s fragments cover of `axis` (compiler/headpad.py: a head of
        another size than a multiple of 16 or 8 padded, the columns past it zeros)."""
        return headpad.extent(self.site, node, axis, size)

    def _mma(self) -> str:
        return f"napkin_mma_m16n8k16_{self.site.dtype}"
