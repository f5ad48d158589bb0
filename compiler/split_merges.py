"""How each reduction over a split axis becomes a partial state per split and a merge over
p_x (compiler/split_rewrite.Rewrite's `_sink` calls these): sums, maxima and minima (and
their means) by their own reduction, argmax and argmin by the first split holding the best
value, the variance by Chan's rule, and the softmax-contraction pair by each split's output
and logsumexp. A mixin of Rewrite: it reads the rewrite's graph, axes (x, s_x, p_x) and
node builders."""

from __future__ import annotations

import numpy as np

from . import ir, row_state
from .canonical import through

_FILL = {"sum": 0.0, "mean": 0.0, "var": 0.0, "max": -np.inf, "logsumexp": -np.inf,
         "min": np.inf}

INT_FILL = float(2 ** 62)    # beyond any position or i32 value; exact in f64 and i64


class Merges:
    def _state_merges(self) -> dict[int, int]:
        """{sink: the merge statement of the softmax-contraction pair whose scores it is a row
        statistic of (row_state.py: a logsumexp, a maximum, a sum of exponentials)}: its merge
        joins that pair's, one kernel merging O and the statistics (each its own merge
        kernel otherwise), as its partial is read from the partial kernel's state."""
        g, out = self.g, {}
        self.paired_with: dict[int, int] = {}       # sink -> the pair it is a statistic of
        pairs = [n for n in self.r.sinks if not isinstance(ir.op(g, n), ir.Reduce)
                 and self._pair_operand(n) is not None]
        for c in pairs:
            soft = through(g, ir.operands(g, c)[self._pair_operand(c)])
            scores = ir.operands(g, soft)[0]
            for n in self.r.sinks:
                if n not in pairs and n not in self.paired_with and \
                        row_state.statistic(g, n, scores, (self.x,), soft):
                    self.paired_with[n] = c
                    if g.nodes[n]["stmt"] != g.nodes[c]["stmt"]:
                        out[n] = g.nodes[c]["stmt"]
        return out

    def _pair_operand(self, n: int):
        """Which operand of contraction n is a softmax over the split axis (the pair merged
        by logsumexps), or None: a softmax over another axis is a plain operand, its value
        at each position of the split axis its own (`softmax[m](j + m)` summed over j), and
        so is one another kernel computes and stores (a split of some kernels alone: P of
        `O = P * V`, P its own statement, enters as an input does)."""
        g, within = self.g, self.r.within
        for k, u in enumerate(ir.operands(g, n)):
            soft = through(g, u)
            if isinstance(ir.op(g, soft), ir.Softmax) and ir.op(g, soft).axes == (self.x,) \
                    and (within is None or g.nodes[soft]["stmt"] in within):
                return k
        return None

    def _reduce(self, n, op, t, part, merge_stmt, name, state=False) -> int:
        """`state`: a row statistic of a pair's scores (_state_merges); a sum of exp(S) then
        masks S with -inf (the paired softmax's scores, as _prime masks them: the partial is
        the partial kernel's state), not exp(S) with 0 (the same values)."""
        g = self.g
        arg = through(g, ir.operands(g, n)[0])
        if n in self.paired_with and isinstance(ir.op(g, arg), ir.Softmax):    # (P's)
            return self._probabilities(n, op, t, part, merge_stmt, name)
        if op.fn == "logsumexp" and n in self.paired_with:      # (the pair's own L_p)
            l_part, _ = self._pair_state(self.paired_with[n])
            return self._laid_out(self._merge("logsumexp", l_part, t.dtype, merge_stmt), t,
                                  name, merge_stmt)
        if state and op.fn == "sum" and ir.op(g, arg) == ir.Map("exp"):
            inner = self.masked(self._read(ir.operands(g, arg)[0], part), -np.inf, part)
            src = self.map("exp", [inner], ir.INTERMEDIATE, part)
            axes = tuple(self.s if a == self.x else a for a in op.axes)
            partial = self._partial(src, "sum", axes, t.dtype, part)
            return self._merge("sum", self._store(partial, f"{name}.part", part), t.dtype,
                               merge_stmt)
        src = self._read(ir.operands(g, n)[0], part)
        axes = tuple(self.s if a == self.x else a for a in op.axes)
        if op.fn == "var":
            return self._variance(src, op, axes, t, part, merge_stmt, name)
        if op.fn in ("argmax", "argmin"):
            return self._arg(src, op, axes, t, part, merge_stmt, name)
        if op.fn in ("max", "min") and ir.kind_of_dtype(ir.type_of(g, src).dtype) != "float":
            # past the axis, a clamped read repeats a real position, but an index of the axis
            # does not (`max[j](j)`: 98 for j < 97 in parts of 33): those positions take a
            # value below (max) or above (min) any real one
            fill = -INT_FILL if op.fn == "max" else INT_FILL
            partial = self._partial(self.masked(src, fill, part), op.fn, axes, t.dtype, part)
        else:
            fn = "sum" if op.fn == "mean" else op.fn
            partial = self._partial(self.masked(src, _FILL[op.fn], part), fn, axes, t.dtype, part)
        stored = self._store(partial, f"{name}.part", part)
        fn = "sum" if op.fn == "mean" else op.fn
        total = self._merge(fn, stored, t.dtype, merge_stmt)
        if op.fn == "mean":
            return self.map("div", [total, self._count(op.axes, merge_stmt)], t.dtype, merge_stmt)
        return total

    def _arg(self, src, op, axes, t, part, merge_stmt, name) -> int:
        """argmax (argmin): per split its best value and the position of its first (a NaN
        beats every number, as in the accumulator); merged by the first split holding the
        best value (argmax[p] of the values), whose position is read there. Ties keep the
        smallest position: within a split by argmax's own rule, across splits because an
        earlier split holds smaller positions; positions past the axis hold a value below
        (above) any real one, so an empty split is never taken."""
        g = self.g
        best = "max" if op.fn == "argmax" else "min"
        integer = ir.kind_of_dtype(ir.type_of(g, src).dtype) != "float"
        fill = (-INT_FILL if best == "max" else INT_FILL) if integer else _FILL[best]
        vals = self.masked(src, fill, part)
        value_t = ir.type_of(g, vals).dtype
        value = self._store(self._partial(vals, best, axes, value_t, part), f"{name}.part", part)
        first = self._partial(vals, op.fn, axes, t.dtype, part)
        i = ir.INT_INTERMEDIATE
        p = self.add(ir.Index(self.p), ir.ArrayType((self.p,), "index"), [], part)
        offset = self.map("mul", [p, self.size(self.s, part)], i, part)
        where = self._store(self.map("add", [first, offset], t.dtype, part), f"{name}.at", part)
        chosen = self.add(ir.Reduce(op.fn, (self.p,)),
                          ir.ArrayType(tuple(a for a in ir.type_of(g, value).axes
                                             if a != self.p), t.dtype), [value], merge_stmt)
        labels = tuple(None if a == self.p else a for a in ir.type_of(g, where).axes)
        return self.add(ir.Gather(labels), ir.ArrayType(ir.gather_axes(
            labels, [ir.type_of(g, chosen).axes]), t.dtype), [where, chosen], merge_stmt)

    def _partial(self, src: int, fn: str, axes, dtype: str, stmt) -> int:
        kept = tuple(a for a in ir.type_of(self.g, src).axes if a not in axes)
        return self.add(ir.Reduce(fn, axes), ir.ArrayType(kept, dtype), [src], stmt)

    def _store(self, n: int, name: str, stmt) -> int:
        """A partial state as a named array, splits first."""
        rest = tuple(a for a in ir.type_of(self.g, n).axes if a != self.p)
        return self.assign(self.fresh(name), n, (self.p,) + rest, stmt)

    def _merge(self, fn: str, stored: int, dtype: str, stmt) -> int:
        rest = tuple(a for a in ir.type_of(self.g, stored).axes if a != self.p)
        return self.add(ir.Reduce(fn, (self.p,)), ir.ArrayType(rest, dtype), [stored], stmt)

    def _variance(self, src, op, axes, t, part, merge_stmt, name) -> int:
        """Per split: its count n_p (from the indices), mean_p and M2_p (two passes over s_x);
        merged by Chan's rule: mean = sum n_p mean_p / N, M2 = sum M2_p + n_p (mean_p - mean)^2."""
        f = t.dtype
        n_p = self._split_count(op.axes, part)
        total = self._partial(self.masked(src, 0.0, part), "sum", axes, f, part)
        positive = self.map("gt", [n_p, self.const(0.0, f, part)], "bool", part)
        safe = self.map("maximum", [n_p, self.const(1.0, f, part)], f, part)
        mean_p = self.map("where", [positive, self.map("div", [total, safe], f, part),
                                    self.const(0.0, f, part)], f, part)
        dev = self.map("sub", [src, mean_p], f, part)
        m2_p = self._partial(self.masked(self.map("mul", [dev, dev], f, part), 0.0, part), "sum",
                             axes, f, part)
        mean_s = self._store(mean_p, f"{name}.mean", part)
        m2_s = self._store(m2_p, f"{name}.m2", part)
        m = merge_stmt
        n_m = self._split_count(op.axes, m)
        count = self._count(op.axes, m)
        mean = self.map("div", [self._merge("sum", self.map("mul", [n_m, mean_s], f, m), f, m),
                                count], f, m)
        shift = self.map("sub", [mean_s, mean], f, m)
        spread = self.map("mul", [n_m, self.map("mul", [shift, shift], f, m)], f, m)
        m2 = self.map("add", [self._merge("sum", m2_s, f, m), self._merge("sum", spread, f, m)],
                      f, m)
        return self.map("div", [m2, count], f, m)

    def _split_count(self, axes, stmt) -> int:
        """Positions of split p_x that lie inside x (times the other reduced axes), as a float
        over [p_x]: clamp(size(x) - p_x * size(s_x), 0, size(s_x))."""
        i = ir.INT_INTERMEDIATE
        p = self.add(ir.Index(self.p), ir.ArrayType((self.p,), "index"), [], stmt)
        start = self.map("mul", [p, self.size(self.s, stmt)], i, stmt)
        left = self.map("sub", [self.size(self.x, stmt), start], i, stmt)
        n = self.map("maximum", [self.map("minimum", [left, self.size(self.s, stmt)], i, stmt),
                                 self.const(0, i, stmt)], i, stmt)
        for a in axes:
            if a != self.x:
                n = self.map("mul", [n, self.size(a, stmt)], i, stmt)
        return self.map("float", [n], ir.INTERMEDIATE, stmt)

    def _count(self, axes, stmt) -> int:
        """The number of positions a mean or variance divides by (the original axes)."""
        sizes = [self.size(a, stmt) for a in axes]
        out = sizes[0]
        for s in sizes[1:]:
            out = self.map("mul", [out, s], ir.INT_INTERMEDIATE, stmt)
        return self.map("float", [out], ir.INTERMEDIATE, stmt)

    def _pair(self, n, op, t, part, merge_stmt, name) -> int:
        """softmax[x](S) V: partial O_p and L_p, merged as softmax[p_x](L_p) O_p."""
        g = self.g
        args = ir.operands(g, n)
        k = self._pair_operand(n)
        probs = self._read(args[k], part)
        other = self.masked(self._read(args[1 - k], part), 0.0, part)
        pair = [probs, other] if k == 0 else [other, probs]
        union = tuple(dict.fromkeys(ir.type_of(g, pair[0]).axes + ir.type_of(g, pair[1]).axes))
        o = self.add(ir.Contract((self.s,)), ir.ArrayType(
            tuple(a for a in union if a != self.s), t.dtype), pair, part,
            span=g.nodes[n]["span"])             # (the diagram's product: N0606 points there)
        o_axes = (self.p,) + t.axes
        o_part = self.assign(self.fresh(f"{name}.part"), o, o_axes, part)
        _, w = self._pair_state(n)
        union = tuple(dict.fromkeys(ir.type_of(g, w).axes + o_axes))
        merged = self.add(ir.Contract((self.p,)), ir.ArrayType(
            tuple(a for a in union if a != self.p), t.dtype), [w, o_part], merge_stmt)
        return self._laid_out(merged, t, name, merge_stmt)

    def _pair_state(self, c: int) -> tuple[int, int]:
        """(L_p, softmax[p_x](L_p)) of pair sink c, built once in its statements: each split's
        logsumexp of its scores, stored as `O.lse` over O's rows only (the value axes are not
        the scores'), and the merge's weights. O's merge reads both; a logsumexp of the same
        scores beside merges from O.lse (one partial, stored once), a row sum or maximum of
        the probabilities weighs its partials by them (_probabilities)."""
        if c in self.states:
            return self.states[c]
        g = self.g
        own = g.nodes[c]["stmt"]
        part, name, t = self.part_stmt[own], equation_name(g, own) or "partial", \
            ir.type_of(g, c)
        k = self._pair_operand(c)
        soft = through(g, self._read(ir.operands(g, c)[k], part))
        scores = ir.operands(g, soft)[0]          # where(valid, S', -inf), built by _prime
        lse = self.add(ir.Reduce("logsumexp", (self.s,)), ir.ArrayType(
            tuple(a for a in ir.type_of(g, scores).axes if a != self.s), t.dtype), [scores], part)
        l_part = self.assign(self.fresh(f"{name}.lse"), lse, (self.p,) + tuple(
            a for a in t.axes if a in ir.type_of(g, lse).axes), part)
        # (each split's own softmax gives 0 on a chunk with no key: its weight here is 0; the
        # row's NaN, where the softmax was written out, comes from the merge's)
        written = ir.op(g, through(g, ir.operands(g, c)[k])).written
        w = self.add(ir.Softmax((self.p,), written), ir.type_of(g, l_part), [l_part], own)
        self.states[c] = l_part, w
        return l_part, w

    def _probabilities(self, n, op, t, part, merge_stmt, name) -> int:
        """A row sum or maximum of a pair's probabilities P (row_state's psum, pmax), merged in
        the one pass over p_x that merges O. The sum: per split the sum of its own
        P_p = softmax[s_x](S') (the partial kernel's state), merged weighed as O is, by
        softmax[p_x](L_p) = exp(L_p - L), a softmax of its own (one reader each: each pairs
        with its product, passes.softmax_pairs; O's and this one's weights shared, both would
        wait for a second pass). The maximum: per split the maximum m_p of its scores S'
        (the state's m), merged as exp(max[p_x](m_p) - L), L = logsumexp[p_x](L_p):
        max[x](P) = exp(max[x](S) - L), reductions that stream beside O's (the weights'
        products' maximum, max[p_x](softmax[p_x](L_p) P_p), waited for the weights). A split
        with no key weighs 0 (m_p, L_p -inf), a row with none gives 0 (NaN where the softmax
        was written out: ir.empty_row)."""
        g = self.g
        l_part, weights = self._pair_state(self.paired_with[n])
        written = ir.op(g, weights).written         # (O's: a row with no key as O's)
        probs = self._read(ir.operands(g, n)[0], part)
        soft = through(g, probs)
        axes = tuple(self.s if a == self.x else a for a in op.axes)
        f = t.dtype
        if op.fn == "sum":
            stored = self._store(self._partial(probs, "sum", axes, f, part), f"{name}.part",
                                 part)
            w = self.add(ir.Softmax((self.p,), written), ir.type_of(g, l_part),
                         [l_part], merge_stmt)
            union = tuple(dict.fromkeys(ir.type_of(g, w).axes + ir.type_of(g, stored).axes))
            merged = self.add(ir.Contract((self.p,)), ir.ArrayType(
                tuple(a for a in union if a != self.p), f), [w, stored], merge_stmt)
            return self._laid_out(merged, t, name, merge_stmt)
        scores = ir.operands(g, soft)[0]          # where(valid, S', -inf), built by _prime
        stored = self._store(self._partial(scores, "max", axes, f, part), f"{name}.part", part)
        top = self._merge("max", stored, f, merge_stmt)
        total = self._merge("logsumexp", l_part, f, merge_stmt)
        empty = self.map("eq", [total, self.const(-np.inf, f, merge_stmt)], "bool", merge_stmt)
        value = self.map("exp", [self.map("sub", [top, total], f, merge_stmt)], f, merge_stmt)
        merged = self.map("where", [empty, self.const(ir.empty_row(ir.op(g, weights))[0], f,
                                                      merge_stmt), value], f, merge_stmt)
        return self._laid_out(merged, t, name, merge_stmt)

    def _laid_out(self, merged: int, t: ir.ArrayType, name: str, stmt) -> int:
        """The merged value in the sink's layout (a name where the merge's differs)."""
        if ir.type_of(self.g, merged).axes != t.axes:
            merged = self.add(ir.Assign(self.fresh(f"{name}.merged")), t, [merged], stmt)
        return merged


def equation_name(g, stmt) -> str | None:
    return next((e.name for e in g.graph["equations"] if e.stmt == stmt), None)
