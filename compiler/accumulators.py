"""Accumulators: what makes a reduction streamable (the paper's B(f(x), y) = f(x ++ y)).

Each accumulator has a state, `init`, `update` with a chunk, `merge` of two
partial states (which also allows splitting a reduced axis across groups) and
`finalize`. The NumPy forms here are what the schedule interpreter runs and
what the CUDA templates print in C; their meaning matches the reference
executor exactly (NaN propagates, fully masked rows give 0, empty sums 0).

States are tuples of arrays whose shape is the result's shape (the reduced
axes removed); `update` takes the chunk with the reduced axes at `axis`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

NEG_INF = -np.inf


@dataclass(frozen=True)
class Accumulator:
    name: str
    state: tuple[str, ...]           # what each state component holds (for explain)
    init: Callable                   # (shape, dtype) -> state
    update: Callable                 # (state, chunk..., axis) -> state
    merge: Callable                  # (state, state) -> state
    finalize: Callable               # state -> value
    positional: bool = False         # update also takes the positions of the chunk's elements


def _full(shape, dtype, value):
    return np.full(shape, value, dtype=dtype)


def _safe(m):
    """A running max usable as a shift: -inf (nothing seen yet) becomes 0."""
    return np.where(m == NEG_INF, 0.0, m).astype(m.dtype)


def _ignore(fn):
    def wrapped(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    return wrapped


# --- sum, max, min, mean ---------------------------------------------------------

SUM = Accumulator(
    "sum", ("running sum",),
    init=lambda shape, dt: (_full(shape, dt, 0.0),),
    update=_ignore(lambda st, x, axis: (st[0] + np.sum(x, axis=axis),)),
    merge=_ignore(lambda a, b: (a[0] + b[0],)),
    finalize=lambda st: st[0],
)

MAX = Accumulator(
    "max", ("running max",),
    init=lambda shape, dt: (_full(shape, dt, NEG_INF),),
    update=lambda st, x, axis: (np.maximum(st[0], np.max(x, axis=axis, initial=NEG_INF)),),
    merge=lambda a, b: (np.maximum(a[0], b[0]),),
    finalize=lambda st: st[0],
)

MIN = Accumulator(
    "min", ("running min",),
    init=lambda shape, dt: (_full(shape, dt, np.inf),),
    update=lambda st, x, axis: (np.minimum(st[0], np.min(x, axis=axis, initial=np.inf)),),
    merge=lambda a, b: (np.minimum(a[0], b[0]),),
    finalize=lambda st: st[0],
)


def _count(x, axis):
    return int(np.prod([x.shape[a] for a in axis]))


MEAN = Accumulator(
    "mean", ("running sum", "count"),
    init=lambda shape, dt: (_full(shape, dt, 0.0), _full(shape, dt, 0.0)),
    update=_ignore(lambda st, x, axis: (st[0] + np.sum(x, axis=axis), st[1] + _count(x, axis))),
    merge=_ignore(lambda a, b: (a[0] + b[0], a[1] + b[1])),
    finalize=_ignore(lambda st: np.where(st[1] > 0, st[0] / np.where(st[1] > 0, st[1], 1), np.nan)
                     .astype(st[0].dtype)),
)


# --- argmax, argmin: the best value and its first position ---------------------------------
# Ties go to the smaller position and a NaN beats every number (the first NaN wins), as
# NumPy's argmax/argmin; the empty state holds no position (NO_POSITION) and finishes as -1.
# Because the choice depends only on (value, position) pairs, merging is order-free.

NO_POSITION = np.iinfo(np.int64).max


def _better(sign):
    def better(v, i, w, j):
        """Where (w, j) beats (v, i)."""
        nan_v, nan_w = np.isnan(v), np.isnan(w)
        with np.errstate(invalid="ignore"):
            wins = (sign * w > sign * v) | ((w == v) & (j < i))
        return np.where(nan_w, ~nan_v | (j < i), ~nan_v & wins)
    return better


def _arg_update(better):
    def update(st, x, axis, positions):
        (a,) = axis
        v, i = st
        moved = np.moveaxis(x, a, -1)
        for k in range(moved.shape[-1]):          # one position at a time, as a thread folds
            w, j = moved[..., k], positions[k]
            take = better(v, i, w, j)
            v, i = np.where(take, w, v), np.where(take, j, i)
        return v, i
    return update


def _arg_merge(better):
    def merge(a, b):
        take = better(a[0], a[1], b[0], b[1])
        return np.where(take, b[0], a[0]), np.where(take, b[1], a[1])
    return merge


def _arg(name, sign, start):
    better = _better(sign)
    return Accumulator(
        name, ("best value", "its first position"),
        init=lambda shape, dt: (_full(shape, dt, start), _full(shape, np.int64, NO_POSITION)),
        update=_arg_update(better), merge=_arg_merge(better),
        finalize=lambda st: np.where(st[1] == NO_POSITION, -1, st[1]).astype(np.int64),
        positional=True)


ARGMAX = _arg("argmax", 1.0, NEG_INF)
ARGMIN = _arg("argmin", -1.0, np.inf)


# --- variance (Welford / Chan) ------------------------------------------------------

def _var_update(st, x, axis):
    n = _count(x, axis)
    if n == 0:
        return st
    mean_b = np.sum(x, axis=axis) / n
    m2_b = np.sum((x - np.expand_dims(mean_b, axis)) ** 2, axis=axis)
    return _var_merge(st, (_full(mean_b.shape, x.dtype, n), mean_b, m2_b))


def _var_merge(a, b):
    na, ma, qa = a
    nb, mb, qb = b
    n = na + nb
    safe = np.where(n > 0, n, 1)
    delta = mb - ma
    mean = ma + delta * (nb / safe)
    m2 = qa + qb + delta * delta * (na * nb / safe)
    return n, mean, m2


VARIANCE = Accumulator(
    "variance", ("count", "running mean", "sum of squared deviations"),
    init=lambda shape, dt: (_full(shape, dt, 0.0), _full(shape, dt, 0.0), _full(shape, dt, 0.0)),
    update=_ignore(_var_update),
    merge=_ignore(_var_merge),
    finalize=_ignore(lambda st: np.where(st[0] > 0, st[2] / np.where(st[0] > 0, st[0], 1), np.nan)
                     .astype(st[2].dtype)),
)


# --- logsumexp and softmax statistics ----------------------------------------------------

def _lse_update(st, x, axis):
    m, s = st
    m_new = np.maximum(m, np.max(x, axis=axis, initial=NEG_INF))
    shift = _safe(m_new)
    s = s * np.exp(m - shift) + np.sum(np.exp(x - np.expand_dims(shift, axis)), axis=axis)
    return m_new, s


def _lse_merge(a, b):
    m = np.maximum(a[0], b[0])
    shift = _safe(m)
    return m, a[1] * np.exp(a[0] - shift) + b[1] * np.exp(b[0] - shift)


LOGSUMEXP = Accumulator(
    "logsumexp", ("running max", "running sum of exp(x - max)"),
    init=lambda shape, dt: (_full(shape, dt, NEG_INF), _full(shape, dt, 0.0)),
    update=_ignore(_lse_update),
    merge=_ignore(_lse_merge),
    # a row holding +inf: its running sum is NaN (inf - inf), its logsumexp +inf
    finalize=_ignore(lambda st: np.where(st[0] == np.inf, np.inf, np.log(st[1]) + _safe(st[0]))),
)

# Softmax alone streams in two passes: these statistics first, then exp(x - m) / l.
SOFTMAX_STATS = Accumulator(
    "softmax statistics", ("running max", "running sum of exp(x - max)"),
    init=LOGSUMEXP.init, update=LOGSUMEXP.update, merge=LOGSUMEXP.merge,
    finalize=lambda st: st,
)


def softmax_normalize(x, stats, axis, empty: float = 0.0):
    """Second pass of a standalone softmax: exp(x - m) / l, `empty` (ir.empty_row) where the
    row is fully masked."""
    m, l = (np.expand_dims(v, axis) for v in stats)
    with np.errstate(all="ignore"):
        p = np.exp(x - _safe(m)) / np.where(l == 0, 1, l)
        return np.where(l == 0, empty, p).astype(x.dtype)


# --- the softmax-contraction pair (online softmax, FlashAttention's state) ---------------

def _sc_update(st, s, contract, axis):
    """s: the chunk of scores; contract(p) contracts probabilities with the chunk of V."""
    m, l, o = st
    m_new = np.maximum(m, np.max(s, axis=axis, initial=NEG_INF))
    shift = _safe(m_new)
    scale = np.exp(m - shift)
    p = np.exp(s - np.expand_dims(shift, axis))
    l = l * scale + np.sum(p, axis=axis)
    pv = contract(p)
    return m_new, l, o * _expand_like(scale, o) + pv


def _expand_like(v, o):
    return v.reshape(v.shape + (1,) * (o.ndim - v.ndim))


def _sc_merge(a, b):
    m = np.maximum(a[0], b[0])
    shift = _safe(m)
    sa, sb = np.exp(a[0] - shift), np.exp(b[0] - shift)
    return m, a[1] * sa + b[1] * sb, a[2] * _expand_like(sa, a[2]) + b[2] * _expand_like(sb, b[2])


def _sc_finalize(st, empty: float = 0.0):
    """o / l, `empty` (ir.empty_row) on a row with no key."""
    m, l, o = st
    lo = _expand_like(l, o)
    return np.where(lo == 0, empty, o / np.where(lo == 0, 1, lo)).astype(o.dtype)


SOFTMAX_CONTRACT = Accumulator(
    "online softmax", ("running max m", "running sum l", "rescaled output o"),
    init=None,  # shapes of (m, l) and o differ: built by the interpreter
    update=_ignore(_sc_update),
    merge=_ignore(_sc_merge),
    finalize=_ignore(_sc_finalize),
)


# --- scans: a carried prefix ---------------------------------------------------------------
# cumsum / cumprod along one axis, chunk by chunk: the state is the running total of the
# chunks before (0 or 1 at first); `step` gives the chunk's inclusive prefixes and the new
# total; two lanes' totals merge by the same operation (a + b, a * b), so a lane's prefixes
# are finished by adding (multiplying) the merged totals of the lanes before it.


@dataclass(frozen=True)
class ScanAccumulator:
    name: str
    identity: float
    step: Callable                   # (total, chunk, axis) -> (prefixes of the chunk, new total)
    merge: Callable                  # (total, total) -> total


def _scan_step(cum, combine):
    def step(total, x, axis):
        prefixes = combine(np.expand_dims(total, axis), cum(x, axis=axis))
        last = np.take(prefixes, [-1], axis=axis).squeeze(axis) if x.shape[axis] else total
        return prefixes, last
    return _ignore(step)


CUMSUM = ScanAccumulator("cumsum", 0.0, _scan_step(np.cumsum, np.add), _ignore(np.add))
CUMPROD = ScanAccumulator("cumprod", 1.0, _scan_step(np.cumprod, np.multiply), _ignore(np.multiply))
SCAN = {"cumsum": CUMSUM, "cumprod": CUMPROD}


REDUCE = {"sum": SUM, "max": MAX, "min": MIN, "mean": MEAN, "var": VARIANCE,
          "logsumexp": LOGSUMEXP, "argmax": ARGMAX, "argmin": ARGMIN}


def for_reduce(fn: str) -> Accumulator:
    return REDUCE[fn]
