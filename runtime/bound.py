"""The order-aware part of the tolerance rule: how far any f32 evaluation order may stray.

NumPy's reference sums pairwise; a kernel sums sequentially in each lane, merges lanes in a
tree and splits across blocks, so its rounding grows with the length of its sequential
accumulations, not NumPy's. The standard forward-error analysis of recursive summation
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §4.2) bounds any order of
the n - 1 additions of n terms by

    |fl(sum x) - sum x| <= gamma_d * sum |x_i|,   gamma_d = d u / (1 - d u),

d the most additions one term passes through (at most n - 1) and u = 2^-24 the unit roundoff
of the f32 accumulator. `evaluate` propagates that analysis through the whole diagram to first
order (running error analysis, Higham §3.3): next to each float64 value it carries E >= 0 such
that a legitimate f32 evaluation is within u * E of it. A sum adds its terms' E and d times
the float64 sum of their magnitudes; a product, quotient or function adds its operands' E
scaled by its sensitivity to them, plus one rounding (|value|); a nested chain adds its
lengths, and the result is u * E / (1 - k u), k the longest chain. d is
`min(n - 1, longest)`: n the reduced axes' product (bounds every order), `longest` what a plan
says its longest sequential accumulation is (`longest_accumulation`), when one is known.

exp is allowed 4 u of its own (2 ulps: ex2.approx.f32's documented error, and CUDA's expf)
plus |x| u from rounding x log2 e; a softmax may subtract its max or a log-sum-exp (a split's
merge), whose rounding, u |lse|, is a relative error of every probability.
"""

from __future__ import annotations

import math

import numpy as np

from ..compiler import ir
from ..compiler.diagram import Diagram
from ..compiler.across_warps import WARP
from . import dtypes, elementwise, gathers, reference
from .bind import bind_sizes, to_numpy
from .labelled import Labelled, contract, relabel

U = 2.0 ** -24      # unit roundoff of the f32 accumulators every backend computes in
FN_ULPS = 4.0       # a library function's own error, in u (2 ulps)
_EXACT = {"lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not", "floor", "ceil", "int",
          "floordiv"}


def evaluate(diagram: Diagram, inputs: dict, longest: int | None = None,
             confidence: float | None = None) -> dict[str, np.ndarray]:
    """Per output name, the absolute error bound of each element (float64, the output's
    shape; 0 where the reference is not finite). With `confidence` (a failure probability,
    say 1e-6), the probabilistic bound instead: each sum's d becomes min(d, lam sqrt(d))
    (`spread`), which holds with probability at least 1 - confidence."""
    g = diagram.ir
    arrays = {name: to_numpy(name, inputs[name], ir.op(g, n).dtype)
              for name, n in g.graph["inputs"].items()}
    sizes = bind_sizes(diagram, {n: a.shape for n, a in arrays.items()})
    lam = None if confidence is None else lam_for(terms(g, sizes), confidence)
    values: dict[int, Labelled] = {}
    errs: dict[int, Labelled] = {}
    chain: dict[int, int] = {}
    out: dict[str, np.ndarray] = {}
    for n in ir.order(g):
        op, typ = ir.op(g, n), ir.type_of(g, n)
        ops = ir.operands(g, n)
        args, eargs = [values[a] for a in ops], [errs[a] for a in ops]
        k = max((chain[a] for a in ops), default=0)
        if isinstance(op, ir.Input):
            data = arrays[op.name].astype(dtypes.numpy_dtype(op.dtype))
            values[n] = Labelled(elementwise.as_kind(data, ir.kind_of_dtype(op.dtype)), typ.axes)
            errs[n], chain[n] = Labelled(np.zeros(()), ()), 0
            continue
        if isinstance(op, ir.Output):
            e = np.broadcast_to(eargs[0].aligned(typ.axes), args[0].aligned(typ.axes).shape)
            v = args[0].aligned(typ.axes)
            scale = 1.0 / (1.0 - k * U) if k * U < 0.5 else math.inf
            out[op.name] = np.where(np.isfinite(v), np.nan_to_num(U * e * scale, nan=0.0), 0.0) \
                * np.ones(v.shape)
            continue
        if isinstance(op, ir.Gather):
            index = [a.aligned(typ.axes) for a in args[1:]]
            labels = [Labelled(np.arange(sizes[lab]), (lab,)).aligned(typ.axes)
                      for lab in op.labels if lab is not None]
            full = tuple(sizes[a] for a in typ.axes)
            v = gathers.gathered(g, n, args[0].data, op.labels, index, labels, clamp=True)
            base = np.broadcast_to(eargs[0].data, args[0].data.shape)
            e = elementwise.gather(base, gathers.positions(op.labels, index, labels), clamp=True)
            values[n] = Labelled(np.broadcast_to(v, full), typ.axes)
            errs[n], chain[n] = Labelled(np.broadcast_to(e, full), typ.axes), k
            continue
        val = reference.step(op, typ, args, sizes, np.float64)
        values[n] = val
        if ir.kind_of_dtype(typ.dtype) != "float":
            errs[n], chain[n] = Labelled(np.zeros(()), ()), 0    # integers are exact
            continue
        e, d = _error(op, typ, args, eargs, val, sizes, longest, lam)
        errs[n], chain[n] = e, k + d
    return out


def mag(x) -> np.ndarray:
    """|x| where finite, else 0 (a masked -inf carries no rounding)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(np.isfinite(x), np.abs(x), 0.0)


def depth(n: int, longest: int | None) -> int:
    """The most additions one of n terms passes through: n - 1 in any order, and no more
    than a plan's longest sequential accumulation."""
    return max(0, min(n - 1, longest if longest is not None else n - 1))


def lam_for(n_terms: int, confidence: float) -> float:
    """lam such that 2 N exp(-lam^2 (1 - u)^2 / 2) <= confidence: the union bound over the N
    terms of every sum (each term's error factor theta is bounded with probability
    1 - 2 exp(-lam^2 (1 - u)^2 / 2), Higham & Mary 2019, Theorem 2.4)."""
    return math.sqrt(2.0 * math.log(2.0 * max(n_terms, 1) / confidence)) / (1.0 - U)


def spread(d: int, lam: float | None) -> float:
    """The multiple of u sum|x_i| a sum's rounding adds: d in the worst case (Higham's gamma_d);
    with lam, the probabilistic gamma~_d(lam) = exp(lam sqrt(d) u + d u^2 / (1 - u)) - 1,
    about lam sqrt(d) u, where it is the smaller (rounding errors independent, of mean zero:
    Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019)."""
    if lam is None or d <= 0:
        return d
    gamma = math.expm1(lam * math.sqrt(d) * U + d * U * U / (1.0 - U)) / U
    return min(float(d), gamma)


def terms(g, sizes: dict) -> int:
    """How many terms all the diagram's sums add, over every element (the union bound's N)."""
    total = 0
    for n in g.nodes:
        op = ir.op(g, n)
        if isinstance(op, (ir.Contract, ir.Reduce, ir.Softmax, ir.Scan)):
            axes = dict.fromkeys(a for m in ir.operands(g, n) for a in ir.type_of(g, m).axes)
            total += math.prod(int(sizes[a]) for a in axes)
    return total


def _error(op, typ, args, eargs, val, sizes, longest, lam=None) -> tuple[Labelled, int]:
    """(E of node's value, the additions and roundings it adds to its operands' chains)."""
    axes = typ.axes
    if isinstance(op, ir.Const):
        exact = float(np.float32(op.value)) == op.value or not math.isfinite(op.value)
        return Labelled(np.asarray(0.0 if exact else abs(op.value)), ()), 1
    if isinstance(op, ir.View):
        return Labelled(relabel(np.broadcast_to(eargs[0].data, args[0].data.shape), op.labels),
                        axes), 0
    if isinstance(op, ir.Assign):
        e = np.broadcast_to(eargs[0].aligned(axes), val.data.shape)
        if op.dtype in dtypes.PRECISION and op.dtype != "f32":    # stored rounded
            e = e + mag(val.data) * (dtypes.EPS[op.dtype] / 2) / U
        return Labelled(e, axes), 1
    if isinstance(op, ir.Map):
        a = [x.aligned(axes) for x in args]
        e = [np.asarray(x.aligned(axes), dtype=np.float64) for x in eargs]
        with np.errstate(all="ignore"):
            return Labelled(np.nan_to_num(_map(op.fn, a, e, np.asarray(val.data)), nan=0.0),
                            axes), 1
    x = Labelled(np.asarray(args[0].data, dtype=np.float64), args[0].axes)
    ex = Labelled(np.broadcast_to(eargs[0].aligned(x.axes), x.data.shape), x.axes)
    with np.errstate(all="ignore"):
        if isinstance(op, ir.Contract):
            b = Labelled(np.asarray(args[1].data, dtype=np.float64), args[1].axes)
            eb = Labelled(np.broadcast_to(eargs[1].aligned(b.axes), b.data.shape), b.axes)
            n = math.prod(sizes[a] for a in dict.fromkeys(x.axes + b.axes) if a not in axes)
            d = depth(n, longest) + 1
            ax, bx = Labelled(mag(x.data), x.axes), Labelled(mag(b.data), b.axes)
            e = contract(ex, bx, axes) + contract(ax, eb, axes) \
                + spread(d, lam) * contract(ax, bx, axes)
            return Labelled(e, axes), d
        dims = tuple(x.axes.index(a) for a in op.axes)
        n = math.prod(x.data.shape[i] for i in dims)
        d = depth(n, longest)
        w = spread(d, lam)
        if isinstance(op, ir.Reduce):
            return Labelled(_reduce(op.fn, x.data, ex.data, dims, n, w, val.data), axes), d + 1
        if isinstance(op, ir.Softmax):
            return Labelled(_softmax(x.data, ex.data, dims, w, val.data), axes), d + 2
        if isinstance(op, ir.Scan):
            i = dims[0]
            if op.fn == "cumsum":
                e = np.cumsum(ex.data, axis=i) + w * np.cumsum(mag(x.data), axis=i)
            else:
                e = mag(val.data) * np.cumsum(np.nan_to_num(ex.data / mag(x.data)) + 1, axis=i)
            return Labelled(np.nan_to_num(e, nan=0.0), axes), d + 1
    raise TypeError(f"no error bound for {op!r}")  # pragma: no cover


def _map(fn: str, a: list, e: list, v: np.ndarray) -> np.ndarray:
    """E of an elementwise function's result from its operands' values `a` and E `e`."""
    av = mag(v)
    if fn in _EXACT:    # float `//` reaches here: its E must have the value's shape
        return np.zeros(np.shape(v))
    if fn in ("add", "sub"):
        return e[0] + e[1] + av
    if fn == "mul":
        return mag(a[1]) * e[0] + mag(a[0]) * e[1] + av
    if fn == "div":
        return (e[0] + av * e[1]) / mag(a[1]) + av
    if fn in ("neg", "abs"):
        return e[0]
    if fn in ("maximum", "minimum"):      # the chosen operand's, either's where they are close
        first = (a[0] >= a[1]) if fn == "maximum" else (a[0] <= a[1])
        close = mag(np.asarray(a[0], np.float64) - a[1]) <= U * (e[0] + e[1])
        return np.where(close, np.maximum(e[0], e[1]), np.where(first, e[0], e[1]))
    if fn == "where":
        return np.where(a[0], e[1], e[2])
    if fn == "float":                       # an integer above 2^24 rounds
        return np.where(av > 2.0 ** 24, av, 0.0)
    if fn == "mod":
        return e[0] + mag(np.floor(a[0] / a[1])) * e[1] + av
    if fn == "pow":
        x, y = np.asarray(a[0], np.float64), np.asarray(a[1], np.float64)
        return av * (mag(y / x) * e[0] + mag(np.log(np.abs(x))) * e[1] + FN_ULPS + mag(y))
    own = FN_ULPS + (mag(a[0]) if fn == "exp" else 0.0)    # exp: x log2 e rounded first
    return _slope(fn, np.asarray(a[0], np.float64)) * e[0] + own * av


def _slope(fn: str, x: np.ndarray) -> np.ndarray:
    """|f'(x)|, by the larger one-sided difference (finite where f is)."""
    h = 1e-6 * np.abs(x) + 1e-30
    f = lambda t: np.asarray(elementwise.apply(fn, [t]), np.float64)   # noqa: E731
    fx = f(x)
    s = np.fmax(np.abs(f(x + h) - fx), np.abs(fx - f(x - h))) / h
    return np.where(np.isfinite(s), s, 0.0)


def _reduce(fn, x, ex, dims, n, d, v) -> np.ndarray:
    ax = mag(x)
    if fn in ("max", "min", "argmax", "argmin"):     # exact: an operand's own error
        return np.max(ex, axis=dims, initial=0.0) if fn in ("max", "min") else np.zeros(())
    if fn == "sum":
        return np.sum(ex, axis=dims) + d * np.sum(ax, axis=dims)
    if fn == "mean":
        return (np.sum(ex, axis=dims) + d * np.sum(ax, axis=dims)) / max(n, 1) + mag(v)
    if fn == "var":
        mu = np.mean(x, axis=dims, keepdims=True)
        emu = (np.sum(ex, axis=dims, keepdims=True)
               + d * np.sum(ax, axis=dims, keepdims=True)) / max(n, 1) + mag(mu)
        dev = mag(x - mu)
        sq = dev * dev
        return (np.sum(2 * dev * (ex + emu + dev) + sq, axis=dims)
                + d * np.sum(sq, axis=dims)) / max(n, 1) + mag(v)
    if fn == "logsumexp":
        p = elementwise.softmax(np.asarray(x, np.float64), dims)
        m = np.max(x, axis=dims, initial=-np.inf, keepdims=True)
        off = mag(x - np.where(np.isfinite(m), m, 0.0))
        return np.sum(p * (ex + FN_ULPS + off + ax), axis=dims) + d + FN_ULPS + 2 * mag(v)
    raise ValueError(fn)  # pragma: no cover


def _softmax(x, ex, dims, d, p) -> np.ndarray:
    """A probability's E: its scores' errors (p_i (E_i + sum_j p_j E_j)), each score's and the
    shift's rounding (the max or a log-sum-exp: |x_i - m|, |m|), exp's own, the normalizer's
    d additions and the division."""
    m = np.max(x, axis=dims, initial=-np.inf, keepdims=True)
    off = mag(x - np.where(np.isfinite(m), m, 0.0))
    rel = ex + mag(x) + 2 * off
    mean = np.sum(p * rel, axis=dims, keepdims=True)
    return p * (rel + mean + mag(m) + d + 2 * FN_ULPS + 2)


def longest_accumulation(plan) -> int:
    """The most additions one term passes through in any accumulation the plan performs:
    a SIMT lane's sequential share of its reduced axes (the axes' product, divided along the
    axis its lanes split) plus the lanes' merge (at most one addition per lane of a warp's
    shuffles, then one per other warp of a split over several: codegen/across_warps.py) plus a split's partial states merged across blocks; a tensor-core
    kernel's contractions count whole (their fragments' order is the hardware's)."""
    g, sizes = plan.graph, plan.sizes
    parts = max((s.parts for s in plan.split.each()), default=0) if plan.split is not None else 0
    longest = 1
    for kp in plan.kernels:
        s = kp.schedule
        for node in kp.kernel.nodes:
            axes = _reduced(g, node)
            if not axes:
                continue
            size = {a: _size(g, sizes, a) for a in axes}
            n = math.prod(size.values())
            if s is not None and not s.tensor_cores and s.split and s.split[0] in size:
                a, ways = s.split
                n = n // max(size[a], 1) * -(-size[a] // ways) + min(ways, WARP) + \
                    max(ways // WARP - 1, 0)
            longest = max(longest, n + parts)
    return longest


def _reduced(g, node: int) -> tuple[str, ...]:
    op = ir.op(g, node)
    if isinstance(op, (ir.Reduce, ir.Softmax, ir.Scan)):
        return op.axes
    if isinstance(op, ir.Contract):
        out = ir.type_of(g, node).axes
        return tuple(a for a in dict.fromkeys(
            x for m in ir.operands(g, node) for x in ir.type_of(g, m).axes) if a not in out)
    return ()


def _size(g, sizes: dict, axis: str) -> int:
    if axis in sizes:
        return int(sizes[axis])
    return int(g.graph["axes"][axis].size or 1)
