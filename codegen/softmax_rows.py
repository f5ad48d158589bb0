"""A row's statistics on the CUDA cores: its max and sum of exponentials (a logsumexp, a
softmax's), in one loop or two (Model.online), merged over lanes; a softmax's probabilities from
them (codegen/scalar.py's Emitter takes these methods)."""

from __future__ import annotations

from ..compiler import ir
from . import accum, across_warps, cexpr, lane_merges
from . import program as P


class SoftmaxRows:
    def _lse(self, n, arg, axes, scope) -> tuple[str, str]:
        """(max, sum of exp(x - max)) of arg over axes, merged over lanes. Where the row is
        read from global memory (Model.online) ONE loop folds a running max and rescaled sum
        (accum.fold_value: one exponential a value), so the row is read once; over a staged
        row two loops, the max then the sum of exponentials (fewer instructions a value, and
        the max is shared with a `max` of the same row)."""
        b = self.b
        if n not in self.ctx.online:
            m = self._reduce_simple("max", arg, axes, scope)
            s_ = b.fresh("acc")
            b.emit(P.Decl("float", s_, "0.0f"))

            def total(s):
                e = cexpr.shifted_exp(f"{self.number(arg, s)} - napkin_shift({m})")
                b.emit(P.Set(s_, f"{s_} + {e}"))
            self._walk(axes, scope, total, [arg])
            self._merge(axes, "sum", s_)
            return m, s_
        m, s_ = b.fresh("acc"), b.fresh("acc")
        b.emit(P.Decl("float", m, "-NAPKIN_INF"))
        b.emit(P.Decl("float", s_, "0.0f"))

        def body(s):
            accum.fold_value(b, "logsumexp", {"m": m, "s": s_}, self.number(arg, s))
        self._walk(axes, scope, body, [arg])
        lanes = self.ctx.lanes_over(axes)
        if lanes > 1:
            b.emit(P.Call("napkin_lanes_lse", (m, s_, f"{across_warps.width(lanes)}"
                                                      f"{self._lane_mask(lanes)}")))
            lane_merges.merge_warps(self.ctx, lanes, "logsumexp", {"m": m, "s": s_},
                              bool(self.scans))
        return m, s_

    def _softmax_row(self, n, op, args, scope) -> tuple[str, str]:
        """(max, reciprocal of the sum of exp: 0 where the sum is) of a softmax's row, computed
        once per row (a streamed softmax's: codegen/accum.finish)."""
        rows = [a for a in ir.type_of(self.g, n).axes if a not in op.axes]
        row = {a: scope[a] for a in rows}
        key = ("softmax-row", n) + tuple((a, row[a].expr) for a in rows)
        stats = self.b.cached(key)
        if stats is None:
            stats = self.ctx.softmax_stats(n, row)
            if stats is None:
                with self._lanes(op.axes, args, row):
                    m, l = self._lse(n, args[0], op.axes, row)
                stats = (m, self.b.value("float", accum.reciprocal(l, op)))
            self.b.remember(key, stats)
        return stats

    def _softmax(self, n, op, args, scope) -> str:
        """A probability: its own exponential times the row's reciprocal (one FMUL a value
        where an IEEE division is MUFU.RCP, a Newton step and a slow-path test; within an
        ulp of f32, the output is rounded to its dtype after)."""
        m, inv = self._softmax_row(n, op, args, scope)
        v = self.number(args[0], scope)
        return self.b.value("float", f"({cexpr.shifted_exp(f'{v} - napkin_shift({m})')} * {inv})")

