"""Attention on tensor cores: FlashAttention-2 on mma.sync.m16n8k16 (compiler/flash.py).

Per block: the block's rows of Q are copied to shared memory once and each warp keeps
its `FM` 16-row slices as A fragments (`ldmatrix.x4`), or re-reads them from there every
chunk, 16 of the head at a time (Schedule.reread). Per chunk of `BC` keys, K and V
are staged (padded rows, zeros outside); each warp computes its scores as C fragments
(`FM x BC/8` mmas per 16 of the head), the scalar emitter applies the diagram's scale
and masks at each element's (row, key) point (keys past the end are -inf), and the online
softmax runs on the fragments: per row (g and g + 8 of each slice) the chunk's maximum
across the 4 lanes of a quad, the rescale of the running sum and of the output
accumulators (the latter jumped over when no row of the warp changed its maximum), then
the probabilities, packed to 16 bits, are the A fragments of `P V`
(the C layout of two 8-key tiles is the A layout of one 16-key tile), multiplied with V's
B fragments (`ldmatrix.x2`, transposed when V is head-contiguous). After the last chunk
the quad adds its partial sums and each output element is `o / l` (0 for a fully masked
row), at whose point the emitter computes the rest of the kernel and stores it.
"""

from __future__ import annotations

import math

from types import SimpleNamespace

from ..compiler import bias_fold, headpad, ir, masking, packing, row_state
from . import accum, flash_bias, masks
from . import program as P
from .cexpr import float_literal
from .mma import FK, FM, FN, MmaLowering

# exp(x) = 2^(x log2 e): the softmax runs in base 2 (one FFMA and one MUFU.EX2 per score)
LOG2E = float_literal(math.log2(math.e))
# each row statistic from the state after the last chunk (compiler/row_state.py): m the row's
# maximum (scaled), l the sum of exp(S - m); l is 0 for a row with no key (and no score
# above -inf) and NaN where a score is NaN or the maximum +inf (inf - inf in each exponent):
# a row whose maximum is +inf gives +inf, as the CUDA cores' reductions (codegen/accum.py)
_STATISTIC = {
    "logsumexp": "{l} == 0.0f ? -NAPKIN_INF : {m} == NAPKIN_INF ? NAPKIN_INF : {m} + logf({l})",
    "max": "{m} == NAPKIN_INF ? NAPKIN_INF : {l} != {l} ? NAPKIN_NAN : {m}",
    "sumexp": "{m} == NAPKIN_INF ? NAPKIN_INF : {l} * expf({m})",
    # ... and of the probabilities P = exp(S - m) / l, `r` the softmax's 1 / l (0 or NaN on
    # a fully masked row: ir.empty_row), NaN where l is: the sum l r (1 to f32 rounding where
    # l > 0) and the maximum exp(m - m) r
    "psum": "{l} * {r}",
    "pmax": "{r}"}
# packing.spans's operations on C expressions (non-negative indices)
_C = SimpleNamespace(div=lambda a, b: f"(({a}) / {b})", mod=lambda a, b: f"(({a}) % {b})",
                     mul=lambda a, b: f"{a} * {b}", same=lambda a, b: f"({a} == {b})",
                     pick=lambda c, a, b: f"({c} ? {a} : {b})", last=lambda n: f"({n} - 1)")


class FlashLowering(MmaLowering):
    spans: dict = {}        # packed rows: each packed axis's range over the block (_box)

    def _block_body(self) -> None:
        b, s = self.b, self.site
        self._origins()
        self.spans = self._packed_spans()
        fm, chunk = self.wtm // FM, self.kp.schedule.stream[1]
        # (heads padded in shared memory: compiler/headpad.py)
        hk, dv = headpad.head_tile(s) // FK, self.wtn // FN    # O's columns: the block's (flash.COLUMNS)
        qt = self._tile(s.q, self.grouped(s.row), self.whole(s.dk, s.head, s.q))
        b.emit(P.Barrier())
        self._copy(qt)
        b.emit(P.Call("napkin_cp_async_wait_all", ()))
        b.emit(P.Barrier())
        self.qt = qt
        if not self.kp.schedule.reread:     # Q's A fragments held for the whole key loop
            b.emit(P.Decl("unsigned", "qa", shape=(fm, hk, 4)))
            self._each([("i0", fm), ("i1", hk)], lambda: self._ldmatrix(
                qt, "qa[i0][i1]", f"wr * {self.wtm} + i0 * {FM}", "i1 * 16", 4))
        if dv:      # (none for row statistics of scores alone: compiler/flash_alone.py)
            b.emit(P.Decl("float", "acc", "{}", shape=(fm, dv, 4)))
        b.emit(P.Decl("float", "rm", shape=(fm, 2)))
        b.emit(P.Decl("float", "rl", "{}", shape=(fm, 2)))
        self._each([("i0", fm), ("i1", 2)], lambda: b.emit(P.Set("rm[i0][i1]", "-NAPKIN_INF")))
        self._lane_rows(fm)         # packed rows: each lane's (r, q), once before the chunks
        self.rows = self._row_vectors(fm)
        self.scaled, self.log2e = self._scale(), LOG2E
        if self.scaled is not None:     # the softmax's positive scale, in its exponent's FFMA
            node, factor, _ = self.scaled
            b.emit(P.Decl("const float", "qks", factor))
            b.emit(P.Decl("const float", "qkl", f"qks * {LOG2E}"))
            self.log2e = "qkl"
        self.bias = bias_fold.lowered(self.g, masking.scores_bias(self.g, row_state.scores_of(
            self.g, self.st)), self.scaled and self.scaled[0], self.kp.model.folded, s.red)
        if self.bias is not None:       # the bias over the scale, as the scores stay unscaled
            self.bias = flash_bias.declare(self, self.bias, s.batch)
        kt = self._tile(s.k, self.chunked(s.red), self.whole(s.dk, s.head, s.k))
        # V read from K's own array (`softmax[x](Q * X) * X`), the whole head: K's tile
        shared = kt if s.v in (s.k, None) and not self._tiled() else None
        vt = self._tile(s.v, self._columns(), self.chunked(s.red), shared) if s.v else None
        # a chunk the diagram's mask hides from every row of the block is neither copied nor
        # computed (causal)
        reducers, kinds = self._skipped()
        span = masks.chunk_span(self, reducers, kinds, self.wm * self.wn * 32, s.red, s.batch)
        known = {"#data": span.bounds} if span else {}
        self.known, self.run = known, span.run if span else None

        def skip(start: str, length: str):
            return masks.skip_test(self, reducers, kinds,
                                   dict(self._box(s.red, start, length), **known))

        def compute(tail: bool):
            self._scores(kt, fm, chunk, hk, tail)
            self._softmax(fm, chunk, dv)
            if vt is not None:
                self._weighted(vt, fm, chunk, dv)
        # full chunks in the loop, with no bounds test per score; a partial last one after it
        self._pipeline([kt] if shared else [kt, vt], compute, None if span and span.band else skip, peel=True,
                       span=(span.first, span.end) if span else None)
        self._place_lane_rows()     # (where the key loop read them)
        self._finish(fm, dv)

    def _skipped(self) -> tuple[list, dict]:
        """(the reducers, their kinds) whose mask tells which chunks the block skips: O's
        paired softmax, or the scores whose row statistics it takes alone (their mask: a
        chunk hidden from the scores is hidden from every statistic of them)."""
        s = self.site
        if s.out is not None:
            return [s.out], {s.out: "pair"}
        return [s.lse[0]], {s.lse[0]: "alone"}

    def _tiled(self) -> bool:
        """Whether the block holds a tile of O's columns (flash.COLUMNS), not the head."""
        return self.wtn < self.site.width

    def _columns(self):
        """V's tile axis along O's columns: the block's tile of them, or the whole head."""
        s = self.site
        return self.grouped(s.dv) if self._tiled() else self.whole(s.dv, s.width, s.v)

    def _packed_spans(self) -> dict:
        """Packed rows under a mask (compiler/packing.py): each packed axis's least and
        greatest index over the block's rows (packing.spans: all of q for a block wrapping
        around it), declared once for the chunk skip's tests, or {}."""
        s = self.site
        if not s.packed or masking.paired_condition(self.g, self.st) is None:
            return {}
        org, top = self._axis_var("org", s.row), f"({self.itype})({self.sizes[s.row]} - 1)"
        hi = f"{org} + {self.tile[s.row] - 1}"
        hi = self.b.value(self.itype, f"({hi} < {top} ? {hi} : {top})", "pk")
        sizes = {a: f"({self.itype})({self.sizes[a]})" for a in s.packed}
        return {a: tuple(self.b.value(self.itype, e, "pk") for e in ends)
                for a, ends in packing.spans(org, hi, s.packed, sizes, _C).items()}

    def _box(self, r: str, start: str = "c0", length: str = "clen") -> dict:
        """KernelLowering._box, a packed axis's range that of the block's rows."""
        return {**super()._box(r, start, length), **self.spans}

    def _scores(self, kt: dict, fm: int, chunk: int, hk: int, tail: bool) -> None:
        """S = Q K on the tensor cores, then the diagram's scale and masks per element (and,
        in a partial chunk, -inf past the last key). A full chunk the mask holds everywhere
        in (below causal's diagonal) takes its condition as `true`: no mask per score."""
        if self.kp.schedule.reread:
            self._scores_reread(kt, fm, chunk, hk)
        else:
            self._scores_held(kt, fm, chunk, hk)
        self._masked(fm, chunk, tail)

    def _scores_held(self, kt: dict, fm: int, chunk: int, hk: int) -> None:
        """Each 8-key tile's scores from the Q fragments held in registers (`qa`), K's B
        fragments two 16-slices of the head per ldmatrix.x4."""
        b = self.b
        b.emit(P.Decl("float", "sc", shape=(fm, chunk // FN, 4)))

        def tile():
            b.emit(P.Decl("float", "fz", "{}", shape=(4,)))
            b.emit(P.Decl("unsigned", "fb", shape=(2, 2)))
            self._b_fragments(kt, hk, lambda i: f"fb[{i} % 2]", lambda i: f"i1 * {FN}",
                              lambda i: f"{i} * 16", "i2", along="k",
                              body=lambda i: b.emit(P.Call(self._mma(), (
                                  "fz", f"qa[i0][{i}]", f"fb[{i} % 2]", "fz"))))
            self._each([("i3", 4)], lambda: b.emit(P.Set("sc[i0][i1][i3]", "fz[i3]")))
        self._each([("i0", fm), ("i1", chunk // FN)], tile)

    def _scores_reread(self, kt: dict, fm: int, chunk: int, hk: int) -> None:
        """Q re-read from shared memory (Schedule.reread): per 16 of the head, the slice's A
        fragment by one ldmatrix.x4, then every key tile's product with it (K's B fragments
        two 8-key tiles per ldmatrix.x4), accumulated into the scores: one slice of Q live
        at a time instead of the whole head."""
        b = self.b
        b.emit(P.Decl("float", "sc", "{}", shape=(fm, chunk // FN, 4)))

        def slice_():
            b.emit(P.Decl("unsigned", "qa", shape=(4,)))
            self._ldmatrix(self.qt, "qa", f"wr * {self.wtm} + i0 * {FM}", "i2 * 16", 4)
            b.emit(P.Decl("unsigned", "fb", shape=(2, 2)))
            self._b_fragments(kt, chunk // FN, lambda i: f"fb[{i} % 2]", lambda i: f"{i} * {FN}",
                              lambda i: "i2 * 16", "i1",
                              body=lambda i: b.emit(P.Call(self._mma(), (
                                  f"sc[i0][{i}]", "qa", f"fb[{i} % 2]", f"sc[i0][{i}]"))))
        self._each([("i0", fm), ("i2", hk)], slice_)

    def _masked(self, fm: int, chunk: int, tail: bool) -> None:
        """The diagram's scale and masks on every score (-inf past the last key of a partial
        chunk); a full chunk the mask holds everywhere in takes its condition as `true`."""
        b, s = self.b, self.site
        score = row_state.scores_of(self.g, self.st)

        cond = masking.paired_condition(self.g, self.st)
        added = masking.additive_mask(self.g, score)

        def element(inside: bool):
            key = f"c0 + i1 * {FN} + fq * 2 + i2 % 2"
            scope, _ = self._point({s.red: key}, row="i2")
            self.values[s.scores] = "sc[i0][i1][i2]"
            if self.scaled is not None:         # the scores unscaled: qkl scales them below
                self.values[self.scaled[0]] = "sc[i0][i1][i2]"
            if self.bias is not None:           # t = X + B / c, or X + B under the scale
                t = flash_bias.score(self, self.bias, scope)
                self.values[self.bias[0]] = t
                if self.bias[3]:                # (the scale's operand: the sum)
                    self.values[self.scaled[0]] = t
            self._rows_at(scope, "i2")
            if inside:
                self.values[cond] = "true"
                if added is not None:      # X + where(true, 0, -inf): X
                    self.values[added[0]] = self.emitter.value(added[1], scope)
            self.line(s.soft if s.soft is not None else s.lse[0])
            value = self.emitter.value(score, scope)
            self.values.clear()
            b.emit(P.Set("sc[i0][i1][i2]", f"(i1 * {FN} + fq * 2 + i2 % 2 < clen) ? {value} : -NAPKIN_INF"
                         if tail else value))

        def elements(inside: bool = False):
            self._each([("i0", fm), ("i1", chunk // FN), ("i2", 4)], lambda: element(inside))
        whole = None if tail else self.whole_chunk(chunk)
        if whole is None or self.inside is False:
            elements()
        elif self.inside:           # (the pipeline's loop over such chunks: mma._pipeline)
            elements(True)
        else:
            b.emit(P.If(whole, self._scoped(lambda: elements(True)), self._scoped(elements)))

    def whole_chunk(self, chunk: int) -> str | None:
        """MmaLowering.whole_chunk: the diagram's condition must hold over the chunk at c0 (by
        the block's index intervals: below causal's diagonal), or the chunk lies inside the
        block's run (masks.data_span: one document of varlen's)."""
        s = self.site
        cond = masking.paired_condition(self.g, self.st)
        if cond is None:
            return None
        whole = masks.must_hold(self.g, cond, dict(self._box(s.red, "c0", str(chunk)), **self.known))
        if whole is None and self.run is not None:
            run, first, last = self.run
            whole = f"({run} && (long long)c0 >= {first} && (long long)c0 + {chunk - 1} <= {last})"
        return whole

    def _softmax(self, fm: int, chunk: int, dv: int) -> None:
        """The online softmax on the score fragments: rows g (slots 0, 1) and g + 8 (2, 3).

        As FlashAttention-2 does it: the row maximum by one FMNMX per score, the
        probabilities as 2^(s log2 e - m log2 e), one FFMA and one MUFU.EX2 (ex2.approx.ftz)
        per score. The maximum is max.NaN (napkin_max_nan), not fmaxf, which skips a NaN
        score: a row holding +inf and a NaN then had the maximum +inf, and its max, logsumexp
        and sum of exponentials statistics (_STATISTIC) +inf where the language's is NaN (the
        sum l, NaN from inf - inf, cannot tell that row from one with no NaN). A NaN maximum
        makes the row's probabilities, sum and output NaN, as the NaN rule asks; a score the
        diagram's mask hides is -inf before any of this, so a NaN under a mask stays hidden.

        The output's rescale is skipped when no row of the warp needs it (FlashAttention-4's
        conditional rescale, exact here): each row's factor 2^((m_old - m_new) log2 e) is
        exactly 1.0 when its running maximum did not change, and a product by 1.0 is the
        identity (NaN, infinities and signed zeros included), so the warp votes whether any
        lane holds a factor other than 1.0 and, if none does, jumps over the FMULs. The vote
        makes the branch warp-uniform: a lane-divergent one would cost the warp the FMULs
        whenever any of its lanes took it, and ptxas wraps it in BSSY/BSYNC (sm_80).
        """
        b = self.b
        if dv:      # (no O to rescale: row statistics of scores alone)
            b.emit(P.Decl("float", "rsc", shape=(fm, 2)))   # each row's rescale factor
            b.emit(P.Decl("bool", "rch", "false"))          # a factor of the lane's other than 1

        def row():
            b.emit(P.Decl("float", "mx", "rm[i0][i1]"))
            self._each([("i2", chunk // FN), ("i3", 2)], lambda: b.emit(
                P.Set("mx", "napkin_max_nan(mx, sc[i0][i2][2 * i1 + i3])")))
            b.emit(P.Set("mx", "napkin_lanes_max(mx, 4)"))       # the quad holds the row
            b.emit(P.Decl("const float", "sh", "napkin_shift(mx)"))
            b.emit(P.Decl("const float", "rs", f"napkin_ex2((rm[i0][i1] - sh) * {self.log2e})"))
            b.emit(P.Decl("const float", "sl", f"-sh * {self.log2e}"))
            b.emit(P.Set("rm[i0][i1]", "mx"))
            if dv:
                b.emit(P.Set("rsc[i0][i1]", "rs"))
                b.emit(P.Set("rch", "rch | (rs != 1.0f)"))
            b.emit(P.Decl("float", "su", "0.0f"))

            def prob():
                b.emit(P.Set("sc[i0][i2][2 * i1 + i3]", f"napkin_ex2(fmaf(sc[i0][i2][2 * i1 + i3], {self.log2e}, sl))"))
                b.emit(P.Set("su", "su + sc[i0][i2][2 * i1 + i3]"))
            self._each([("i2", chunk // FN), ("i3", 2)], prob)
            b.emit(P.Set("rl[i0][i1]", "rl[i0][i1] * rs + su"))
        self._each([("i0", fm), ("i1", 2)], row)
        if not dv:          # (no O to rescale: row statistics of scores alone)
            return
        b.emit(P.If("__any_sync(0xffffffffu, rch)", self._scoped(lambda: self._each(
            [("i0", fm), ("i1", 2), ("i2", dv), ("i3", 2)], lambda: b.emit(
                P.Set("acc[i0][i2][2 * i1 + i3]", "acc[i0][i2][2 * i1 + i3] * rsc[i0][i1]"))))))

    def _weighted(self, vt: dict, fm: int, chunk: int, dv: int) -> None:
        """O += P V: the probabilities packed into A fragments, V's B fragments per 8 columns."""
        b = self.b
        pack = "napkin_pack_half2" if self.site.dtype == "f16" else "napkin_pack_bf162"

        def ktile():
            parts = [f"{pack}(sc[i0][2 * i1 + {t}][{2 * h}], sc[i0][2 * i1 + {t}][{2 * h + 1}])"
                     for t in (0, 1) for h in (0, 1)]
            b.emit(P.Decl("unsigned", "pa", shape=(4,), init="{" + ", ".join(parts) + "}"))

            b.emit(P.Decl("unsigned", "fb", shape=(2, 2)))
            self._b_fragments(vt, dv, lambda i: f"fb[{i} % 2]", lambda i: f"{i} * {FN}",
                              lambda i: "i1 * 16", "i2",
                              body=lambda i: b.emit(P.Call(self._mma(), (
                                  f"acc[i0][{i}]", "pa", f"fb[{i} % 2]", f"acc[i0][{i}]"))))
        self._each([("i0", fm), ("i1", chunk // FK)], ktile)

    def _finish(self, fm: int, dv: int) -> None:
        """The quad's sums, then o / l at every output element and the kernel's stores."""
        b, s = self.b, self.site
        # the row statistics stored from the state (compiler/row_state.py), one array each
        stats = {n: f"lse{j or ''}" for j, n in enumerate(s.lse)}
        for name in stats.values():
            b.emit(P.Decl("float", name, shape=(fm, 2)))
        m = f"rm[i0][i1]{' * qks' if self.scaled else ''}"
        r = accum.reciprocal("rl[i0][i1]", ir.op(self.g, s.soft), self.sizes) \
            if s.soft is not None else None      # (none alone: no probabilities)
        self._each([("i0", fm), ("i1", 2)], lambda: (
            b.emit(P.Set("rl[i0][i1]", "napkin_lanes_sum(rl[i0][i1], 4)")),
            [b.emit(P.Set(f"{name}[i0][i1]", _STATISTIC[kind].format(m=m, l="rl[i0][i1]",
                                                                     r=r)))
             for name, kind in zip(stats.values(), s.lse_kinds)],
            r is not None and b.emit(P.Set("rl[i0][i1]", r))))

        # the sums over O's columns after the stream (D = sum[d](dO * O)): each lane adds its
        # columns of the row, then the quad adds the lanes' (as the row sums above)
        sums = {n: f"es{j}" for j, n in enumerate(s.epilogue)}
        # stores over the rows only (the logsumexp, the sums): once a row, in the loop below
        per_row = set(sums) | set(s.lse)
        of_rows = {n for n in self.k.stores if masking.through_names(self.g, n) in per_row}
        for name in sums.values():
            b.emit(P.Decl("float", name, "{}", shape=(fm, 2)))

        # O's columns from the block's first (flash.COLUMNS). Every block along them holds
        # the rows' statistics and writes what is stored over rows only (the logsumexp), the
        # same value: a merge in the last block of a tile of columns (compiler/last_block.py)
        # reads the one its own tile's blocks wrote
        column = f"i1 * {FN} + fq * 2 + i2 % 2"
        if self._tiled():
            column = f"{self._axis_var('org', s.dv)} + {column}"

        def point():
            scope, valid = self._point({s.dv: column}, row="i2")
            self.values[s.out] = "acc[i0][i1][i2] * rl[i0][i2 / 2]"
            for n, name in stats.items():
                self.values[n] = f"{name}[i0][i2 / 2]"
            for n, name in sums.items():
                term = self.emitter.value(ir.operands(self.g, n)[0], scope)
                b.emit(P.Set(f"{name}[i0][i2 / 2]", f"{name}[i0][i2 / 2] + (({valid}) ? "
                                                     f"(float)({term}) : 0.0f)"))
            for n in self.k.stores:
                if n not in of_rows:
                    self._store(n, scope, {"valid": valid})
            self.values.clear()
        if dv:
            self._each([("i0", fm), ("i1", dv), ("i2", 4)], point)
        if not of_rows:
            return

        def row():
            for name in sums.values():
                b.emit(P.Set(f"{name}[i0][i1]", f"napkin_lanes_sum({name}[i0][i1], 4)"))
            scope, valid = self._point({}, row="(2 * i1)")
            self.values.update((n, f"{name}[i0][i1]") for n, name in sums.items())
            self.values.update((n, f"{name}[i0][i1]") for n, name in stats.items())
            for n in sorted(of_rows):   # one lane of the quad writes the row's value (the
                self._store(n, scope, {"valid": f"{valid} && fq == 0"})   # 4 lanes hold it)
            self.values.clear()
        self._each([("i0", fm), ("i1", 2)], row)

    def _mma(self) -> str:
        return f"napkin_mma_m16n8k16_{self.site.dtype}"

    def _scale(self):
        """(the node, the C factor, its inverse) of the softmax's positive scale (compiler/masking.
        softmax_scale, decided on the kernel's model): the scores stay unscaled in registers
        (their row maximum too: a positive factor keeps the order) and the factor joins
        log2(e) in the exponent's one FFMA, one FMUL per score fewer (FlashAttention-2's
        softmax_scale_log2). None when the argument is not the scores times a scalar."""
        node = self.kp.model.scale
        if node is None:
            return None
        a, c, fn = bias_fold.split(self.g, node)
        found = masking.scores_bias(self.g, row_state.scores_of(self.g, self.st))
        under = found is not None and found[1] == node and found[3]   # `(X + B) / c`
        if masking.through_names(self.g, a) != self.site.scores and not under:
            return None     # (not this site's scores)
        factor = self.emitter.value(c, {})
        return node, (f"1.0f / ({factor})" if fn == "div" else f"({factor})"), \
            (f"({factor})" if fn == "div" else f"1.0f / ({factor})")
