"""Scalar code for one point of an array: the value of any IR node at an index scope.

`Emitter.value(node, scope)` emits the statements computing the node's value
at the positions `scope` gives its axes and returns a C expression for it.
Reductions over whole axes become loops (walking a split axis with stride
`w` and merging the lanes' partial states by warp shuffles); their loop
invariants are computed once, outside the loop. Values are cached per scope,
so a node used twice at one point is computed once.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from ..compiler import ir, register_arrays
from . import across_warps, cexpr, held, lane_merges
from . import program as P
from .builder import Builder, Ix
from .positions import PositionReads
from .softmax_rows import SoftmaxRows

# what a constant divisor may be made of (folded in f32, as the kernel would compute it)
_FOLDABLE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
             "neg": np.negative, "sqrt": np.sqrt, "rsqrt": lambda x: np.float32(1) / np.sqrt(x)}


class Emitter(SoftmaxRows, PositionReads):
    def __init__(self, b: Builder, g, ctx):
        self.b, self.g, self.ctx = b, g, ctx
        # spellings in force instead of cexpr.MAP's (a tensor-core chain's operands, rounded
        # to 16 bits for the next product, take exp as ex2.approx: codegen/chain.py)
        self.fast: dict[str, str] = {}
        self.scans = 0      # scan loops open around the point (their trip counts are per thread)

    # -- entry point ------------------------------------------------------------------
    def value(self, n: int, scope: dict[str, Ix]) -> str:
        g = self.g
        axes = ir.type_of(g, n).axes
        op = ir.op(g, n)
        extra = (op.axis,) if isinstance(op, (ir.Index,)) else ()
        key = (n,) + tuple((a, scope[a].expr) for a in axes + extra)
        hit = self.b.cached(key)
        if hit is not None:
            return hit
        found = self.ctx.registered(n, scope)
        out = found if found is not None else self._compute(n, op, scope)
        self.b.remember(key, out)
        return out

    def _static(self, n: int) -> float | None:
        """The f32 value of a constant subexpression (numbers and static sizes under + - * /,
        sqrt, rsqrt), or None."""
        op = ir.op(self.g, n)
        if isinstance(op, ir.Const):
            return float(np.float32(op.value))
        if isinstance(op, ir.SizeOf):
            size = self.ctx.size(op.axis)
            return float(np.float32(int(size))) if str(size).isdigit() else None
        if isinstance(op, ir.Map) and op.fn in _FOLDABLE:
            args = [self._static(a) for a in ir.operands(self.g, n)]
            if any(a is None for a in args):
                return None
            with np.errstate(all="ignore"):
                return float(_FOLDABLE[op.fn](*(np.float32(a) for a in args)))
        return None

    def _compute(self, n: int, op, scope) -> str:
        g, b = self.g, self.b
        if isinstance(op, ir.Input) or n in self.ctx.loads:
            return self.ctx.load(n, scope)
        if isinstance(op, ir.Const):
            if self.kind(n) == "int":     # integers are long long in kernels: napkin_abs(2LL)
                return f"((long long){cexpr.int_literal(int(op.value))})"
            return cexpr.float_literal(op.value)
        if isinstance(op, ir.Index):
            return f"((long long)({scope[op.axis].expr}))"
        if isinstance(op, ir.SizeOf):
            return f"((long long)({self.ctx.size(op.axis)}))"
        args = ir.operands(g, n)
        if isinstance(op, ir.View):
            base = args[0]
            declared = ir.type_of(g, base).axes
            inner = dict(scope)
            for axis, label in zip(declared, op.labels):
                inner[axis] = scope[label]
            if tuple(declared) == tuple(op.labels):
                return self.value(base, inner)
            # staged tiles cover the ranges of the declared axes, not of the labels: what a
            # view reads (through names and ops too) comes from global memory
            self.ctx.views += 1
            try:
                return self.value(base, inner)
            finally:
                self.ctx.views -= 1
        if isinstance(op, ir.Reshape):
            return self._reshape(n, args[0], scope)
        if isinstance(op, ir.Gather):
            return self._gather(op, args, scope)
        if isinstance(op, ir.Assign):
            return self.value(args[0], scope)
        if isinstance(op, ir.Map):
            divisor = self._static(args[1]) if op.fn == "div" else None
            if divisor is not None and divisor != 0 and math.isfinite(divisor):
                # x / c by a constant as x * (1/c) (1/c computed here): one FMUL where an IEEE
                # division is MUFU.RCP, a Newton step and a slow-path check (within an ulp)
                return b.value("float", f"({self._as(args[0], scope, 'float')} * "
                                        f"{cexpr.float_literal(1.0 / divisor)})")
            kind = self.kind(n)
            wants = self._operand_kinds(op.fn, kind, args)
            vals = [self._as(a, scope, want) for a, want in zip(args, wants)]
            ints = all(self.kind(a) == "int" for a in args)
            spelling = cexpr.INT_MAP.get(op.fn) if ints else None
            spelling = spelling or self.fast.get(op.fn) or cexpr.MAP[op.fn]
            return b.value(cexpr.CKIND[kind], spelling.format(*vals))
        if isinstance(op, ir.Contract):
            return self._contract(n, op, args, scope)
        if isinstance(op, ir.Reduce):
            return self._reduce(n, op, args, scope)
        if isinstance(op, ir.Softmax):
            return self._softmax(n, op, args, scope)
        if isinstance(op, ir.Scan):
            return self._scan(op, args, scope)
        raise TypeError(f"cannot lower {op!r}")  # pragma: no cover

    # -- value kinds (docs/language.md: integers in 64 bits, promoted to float when mixed) ----
    def kind(self, n: int) -> str:
        return ir.kind_of_dtype(ir.type_of(self.g, n).dtype)

    def _operand_kinds(self, fn: str, kind: str, args) -> list:
        """The kind each operand of a map is read as (None: as it is)."""
        if fn in ("float", "int", "and", "or", "not"):
            return [None] * len(args)
        if fn == "where":
            return [None, kind, kind]
        if fn in cexpr.BOOL_RESULT:   # comparisons: in float when either side is a float
            mixed = any(self.kind(a) == "float" for a in args)
            return ["float" if mixed else None] * len(args)
        return [kind] * len(args)

    def number(self, m: int, scope) -> str:
        """The value of m as a float: what every reduction but argmax/argmin folds."""
        return self._as(m, scope, "float")

    def _as(self, m: int, scope, want) -> str:
        """The value of m, converted to a float where one is wanted and m is an integer."""
        if want != "float" or self.kind(m) != "int":
            return self.value(m, scope)
        op = ir.op(self.g, m)
        if isinstance(op, ir.Const):
            return cexpr.float_literal(op.value)
        return f"((float)({self.value(m, scope)}))"

    # -- reductions over whole axes ---------------------------------------------------------
    def _hoist(self, roots, axes, scope) -> None:
        """Compute, before a loop over `axes`, what its body needs that does not vary along them."""
        g = self.g
        seen, stack = set(), list(roots)
        while stack:
            m = stack.pop()
            if m in seen:
                continue
            seen.add(m)
            op = ir.op(g, m)
            own = set(ir.type_of(g, m).axes) | ({op.axis} if isinstance(op, ir.Index) else set())
            if isinstance(op, (ir.Const, ir.Index, ir.SizeOf, ir.Input)) or m in self.ctx.stops \
                    or m in self.ctx.loads:
                continue
            if not own & set(axes) and own <= set(scope) and not isinstance(op, ir.Input) \
                    and m not in self.ctx.loads:
                self.value(m, scope)
                continue
            if isinstance(op, ir.Softmax):
                rows = own - set(op.axes)
                if not rows & set(axes) and rows <= set(scope):
                    self._softmax_row(m, op, ir.operands(g, m), scope)
            stack.extend(ir.operands(g, m))

    def _walk(self, axes, scope, body, roots=()) -> None:
        """Nested loops over `axes` (the split axis strided by lanes), calling body(scope)."""
        if roots:
            self._hoist(roots, axes, scope)
        if not axes:
            body(scope)
            return
        a, rest = axes[0], axes[1:]
        trips = self.ctx.unrolled(a)
        if trips:   # the lanes' trips, each at a constant offset from the lane (held.py)
            for k in range(trips):
                self.ctx.serial += 1
                self._walk(rest, {**scope, a: Ix(self.ctx.lane_offset(k), str(k))}, body)
                self.ctx.serial -= 1
            return
        var = self.b.fresh("j")
        start, step = self.ctx.walk(a)
        # a lane's register arrays over the split axis hold its share (accum.extent_of): a walk
        # of all of it (in a loop the lanes share) indexes none (Model.whole_walks: not planned)
        whole, shared = step == "1" and self.ctx.shares(a), step != "1"
        local = f"(({var}) / {step})" if shared else None if whole else var
        constant = getattr(self.ctx, "constant_trips", None)    # (a CUDA-core kernel's)
        trips = None if whole or constant is None else constant(a, int(step))
        if trips is not None:   # the arrays' planned extent, unrolled (register_arrays.py)
            def walked(at):
                self.ctx.serial += shared
                self._walk(rest, {**scope, a: at}, body)
                self.ctx.serial -= shared
            held.constant_walk(self.ctx, a, var, start, step, trips, walked)
            return

        def inner():
            self.ctx.serial += shared     # nested reductions in a lane-strided loop: per lane
            self._walk(rest, {**scope, a: Ix(var, local, whole)}, body)
            self.ctx.serial -= shared
        size = self.ctx.size(a)
        with self.b.unrolling(var, shared and size.isdigit() and
                              register_arrays.static_walk(int(size), int(step))):
            self.b.loop(var, start, size, step, inner)

    def _merge(self, a_axes, kind: str, var: str) -> None:
        lanes = self.ctx.lanes_over(a_axes)
        if lanes > 1:
            width = across_warps.width(lanes)
            self.b.emit(P.Set(var, f"{cexpr.LANES[kind]}({var}, {width}{self._lane_mask(lanes)})"))
            lane_merges.merge_warps(self.ctx, lanes, kind, {"s": var}, bool(self.scans))

    @contextlib.contextmanager
    def _lanes(self, axes, args, scope):
        """A reduction over `axes` of `args` at `scope`: per lane where its row differs
        between the lanes that would split it (KernelLowering.pinned), else as the context
        walks it."""
        row = [scope[a].expr for m in args for a in ir.type_of(self.g, m).axes
               if a not in axes and a in scope]
        pin = self.ctx.pinned(axes, row)
        self.ctx.serial += pin
        try:
            yield
        finally:
            self.ctx.serial -= pin

    def _contract(self, n, op, args, scope) -> str:
        with self._lanes(op.axes, args, scope):
            return self._contract_loop(op, args, scope)

    def _contract_loop(self, op, args, scope) -> str:
        acc = self.b.fresh("acc")
        self.b.emit(P.Decl("float", acc, "0.0f"))

        def body(s):
            x, y = (self.number(a, s) for a in args)
            self.b.emit(P.Set(acc, f"{acc} + {x} * {y}"))
        self._walk(op.axes, scope, body, args)
        self._merge(op.axes, "sum", acc)
        return acc

    def _reduce(self, n, op, args, scope) -> str:
        b = self.b
        if op.fn in ir.INDEX_REDUCTIONS:
            with self._lanes(op.axes, args, scope):
                return self._arg_reduce(op, args, scope)
        # a reduction of one argument over the same axes at the same row is one loop, whether
        # it is a node of the diagram or a variance's own mean (layernorm's mu and var's mean
        # of X: a second loop over the row before)
        row = tuple((a, scope[a].expr) for a in ir.type_of(self.g, args[0]).axes
                    if a not in op.axes and a in scope)
        key = ("reduce", op.fn, args[0], tuple(op.axes), row)
        hit = b.cached(key) if op.fn in ("sum", "max", "min", "mean") else None
        if hit is not None:
            return hit
        with self._lanes(op.axes, args, scope):
            out = self._reduce_loop(n, op, args, scope)
        if op.fn in ("sum", "max", "min", "mean"):
            b.remember(key, out)
        return out

    def _reduce_loop(self, n, op, args, scope) -> str:
        b = self.b
        if op.fn in ("sum", "max", "min"):
            acc = b.fresh("acc")
            b.emit(P.Decl("float", acc, cexpr.REDUCE_INIT[op.fn]))

            def body(s):
                v = self.number(args[0], s)
                b.emit(P.Set(acc, cexpr.REDUCE_STEP[op.fn].format(acc=acc, v=v)))
            self._walk(op.axes, scope, body, args)
            self._merge(op.axes, op.fn, acc)
            return acc
        if op.fn == "mean":
            total = b.fresh("acc")
            b.emit(P.Decl("float", total, "0.0f"))

            def body(s):
                v = self.number(args[0], s)
                b.emit(P.Set(total, f"{total} + {v}"))
            self._walk(op.axes, scope, body, args)
            self._merge(op.axes, "sum", total)
            return self._over_count(total, op.axes)
        if op.fn == "logsumexp":
            m, s_ = self._lse(n, args[0], op.axes, scope)
            # a row holding +inf: exp(inf - inf) made the sum NaN; the logsumexp is +inf
            return b.value("float", f"({m} == NAPKIN_INF ? NAPKIN_INF : "
                                    f"logf({s_}) + napkin_shift({m}))")
        if op.fn == "var":
            mean = self._reduce_simple("mean", args[0], op.axes, scope)
            acc = b.fresh("acc")
            b.emit(P.Decl("float", acc, "0.0f"))

            def body(s):
                v = self.number(args[0], s)
                b.emit(P.Set(acc, f"{acc} + ({v} - {mean}) * ({v} - {mean})"))
            self._walk(op.axes, scope, body, args)
            self._merge(op.axes, "sum", acc)
            return self._over_count(acc, op.axes)
        raise TypeError(op.fn)  # pragma: no cover

    def _over_count(self, total: str, axes) -> str:
        """A mean's sum over the count of its positions, known from the sizes (the loops walk
        every position of `axes`: a mean over a split axis is the split sum over its size,
        compiler/split.py), NaN over none: no count kept per element."""
        count = " * ".join(f"(float)({self.ctx.size(a)})" for a in axes)
        return self.b.value("float", f"({count} > 0.0f ? {total} / ({count}) : NAPKIN_NAN)")

    def _arg_reduce(self, op, args, scope) -> str:
        """argmax/argmin over one whole axis: the best value and its first position."""
        b = self.b
        (axis,) = op.axes
        best, pos = b.fresh("acc"), b.fresh("pos")
        b.emit(P.Decl("float", best, cexpr.ARG_INIT[op.fn]))
        b.emit(P.Decl("long long", pos, "NAPKIN_NO_POSITION"))

        def body(s):
            x = self.number(args[0], s)
            b.emit(P.Call(f"napkin_{op.fn}_fold", (best, pos, x, f"((long long)({s[axis].expr}))")))
        self._walk(op.axes, scope, body, args)
        lanes = self.ctx.lanes_over(op.axes)
        if lanes > 1:
            b.emit(P.Call(f"napkin_lanes_{op.fn}", (best, pos, f"{across_warps.width(lanes)}"
                                                                f"{self._lane_mask(lanes)}")))
            lane_merges.merge_warps(self.ctx, lanes, op.fn, {"s": best, "i": pos}, bool(self.scans))
        return b.value("long long", f"({pos} == NAPKIN_NO_POSITION ? -1LL : {pos})")

    def _scan(self, op, args, scope) -> str:
        """cumsum/cumprod at one position: the fold of every position up to it, read as a view
        reads (from global memory: staged tiles and chunks cover the block's positions only)."""
        b = self.b
        (axis,) = op.axes
        acc = b.fresh("acc")
        b.emit(P.Decl("float", acc, cexpr.SCAN_INIT[op.fn]))
        var = b.fresh("j")

        def body():
            v = self.number(args[0], {**scope, axis: Ix(var)})
            b.emit(P.Set(acc, cexpr.SCAN_STEP[op.fn].format(acc=acc, v=v)))
        # the lanes of a uniform walk along `axis` (held.loops) make different trips here:
        # what the loop reduces over the split axis runs per lane
        ragged = self.ctx.varies(scope[axis].expr)
        self.ctx.views += 1
        self.scans += 1
        self.ctx.serial += ragged
        try:
            self._hoist(args, (axis,), scope)
            b.loop(var, "0", f"({scope[axis].expr}) + 1", "1", body, ctype="long long")
        finally:
            self.ctx.views -= 1
            self.scans -= 1
            self.ctx.serial -= ragged
        return acc

    def _lane_mask(self, lanes) -> str:
        """The shuffle mask argument of a merge over `lanes`: the group's own inside a scan's
        loop (napkin_group_mask), else none (the full warp)."""
        return f", napkin_group_mask({lanes})" if self.scans else ""

    def _reduce_simple(self, fn, arg, axes, scope) -> str:
        return self._reduce(None, ir.Reduce(fn, axes), [arg], scope)
