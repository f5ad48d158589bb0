"""NumPy meaning of every elementwise function and reduction of the language.

Shared by the reference executor and the schedule interpreter, so both agree by
construction on what each function means (NaN propagates through maximum and
minimum; a fully masked softmax row is 0; logsumexp of an empty or fully masked
row is -inf).
"""

from __future__ import annotations

import math

import numpy as np

_SQRT_2_OVER_PI = np.sqrt(2.0 / np.pi)


def _sigmoid(x):
    # exp of a non-positive argument never overflows
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z)).astype(np.result_type(x, np.float32))


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


_erf = np.frompyfunc(math.erf, 1, 1)
_I64 = np.iinfo(np.int64)


def _float(x):
    """An integer or boolean array as float64 (floats keep their precision)."""
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _to_int(x):
    """`int(x)`: toward zero; NaN gives 0 and values past the int64 range saturate."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return x.astype(np.int64)
    t = np.trunc(np.where(np.isnan(x), 0.0, np.clip(x, -2.0 ** 62, 2.0 ** 62)))
    out = t.astype(np.int64)
    out = np.where(x >= 2.0 ** 63, _I64.max, out)
    return np.where(x < -(2.0 ** 63), _I64.min, out)


def _keep_int(fn):
    return lambda x: x if np.asarray(x).dtype.kind in "iub" else fn(x)


MAP = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "neg": np.negative,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not,
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh, "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0) if x.dtype.kind in "iu" else   # (exact: 0.0 made
            np.where(x > 0, x, np.where(np.isnan(x), x, 0.0)).astype(x.dtype),  # it float64)
    "gelu": _gelu, "silu": lambda x: x * _sigmoid(x), "abs": np.abs,
    "maximum": np.maximum, "minimum": np.minimum,
    "where": np.where,
    "erf": lambda x: np.asarray(_erf(_float(x)), dtype=_float(x).dtype), "log1p": np.log1p,
    "expm1": np.expm1, "sin": np.sin, "cos": np.cos,
    "floor": _keep_int(lambda x: _to_int(np.floor(x))), "ceil": _keep_int(lambda x: _to_int(np.ceil(x))), "mod": np.mod,   # the sign of b, as Python's %; an integer mod 0 is 0, a float NaN
    "pow": lambda a, b: np.power(_float(a), _float(b)),
    "floordiv": np.floor_divide,   # toward -inf, as Python's //; an integer // 0 is 0
    "float": _float, "int": _to_int,
}

# The value kind a result is held in: every backend casts a map's result to the kind the
# type rules give it (an int result is int64, a bool one bool, a float one its float type).
CASTS = {"int": np.int64, "bool": np.bool_}


def as_kind(data, kind: str, compute=np.float64) -> np.ndarray:
    """`data` in the NumPy dtype that holds values of `kind` ("float": `compute`)."""
    data = np.asarray(data)
    want = np.dtype(CASTS.get(kind, compute))
    return data if data.dtype == want else data.astype(want)


class OutOfRange(Exception):
    """A gathered position outside its axis: (position k, the index, the axis's size, where)."""


def gather(base: np.ndarray, index: list[np.ndarray], clamp: bool = False) -> np.ndarray:
    """base[index[0], index[1], ...] (broadcast), every index checked against its axis first:
    an out-of-range read is an error on the CPU backends, never a wrap. With `clamp`, such a
    read takes the nearest row, as the emitted CUDA does (the caller decides whether the
    value is used: runtime/unused_reads.py); along an empty axis there is none."""
    for k, ix in enumerate(index):
        bad = outside(ix, base.shape[k])
        if np.any(bad) and (not clamp or not base.shape[k]):
            at = np.unravel_index(int(np.argmax(bad)), bad.shape)
            raise OutOfRange(k, int(ix[at]), base.shape[k], at)
    if clamp:
        index = [np.clip(ix, 0, base.shape[k] - 1) for k, ix in enumerate(index)]
    return base[tuple(index)]


def outside(ix: np.ndarray, size: int) -> np.ndarray:
    """Where positions `ix` fall outside an axis of `size`."""
    return (ix < 0) | (ix >= size)


def apply(fn: str, args: list[np.ndarray]) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(MAP[fn](*args))


def reduce(fn: str, x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    """Reduce along the given dimensions."""
    with np.errstate(all="ignore"):
        if fn in ("argmax", "argmin"):
            return arg_reduce(fn, x, axis[0])
        if fn == "sum":
            return np.sum(x, axis=axis)
        if fn == "max":
            return np.max(x, axis=axis, initial=-np.inf)
        if fn == "min":
            return np.min(x, axis=axis, initial=np.inf)
        if fn == "mean":
            count = int(np.prod([x.shape[a] for a in axis]))
            return np.sum(x, axis=axis) / x.dtype.type(count) if count else \
                np.full(np.delete(x.shape, axis), np.nan, x.dtype)
        if fn == "var":
            count = int(np.prod([x.shape[a] for a in axis]))
            if not count:
                return np.full(np.delete(x.shape, axis), np.nan, x.dtype)
            mu = np.sum(x, axis=axis, keepdims=True) / x.dtype.type(count)
            return np.sum((x - mu) * (x - mu), axis=axis) / x.dtype.type(count)
        if fn == "logsumexp":
            m = np.max(x, axis=axis, initial=-np.inf, keepdims=True)
            shift = np.where(np.isfinite(m), m, 0.0).astype(x.dtype)
            out = np.log(np.sum(np.exp(x - shift), axis=axis, keepdims=True)) + shift
            return np.squeeze(out, axis=axis)
    raise ValueError(fn)


def arg_reduce(fn: str, x: np.ndarray, axis: int) -> np.ndarray:
    """The first position of the largest (argmax) or smallest (argmin) value along `axis`:
    ties go to the smallest index, a NaN wins (its first position), an empty axis gives -1."""
    if x.shape[axis] == 0:
        return np.full(np.delete(x.shape, axis), -1, np.int64)
    return (np.argmax if fn == "argmax" else np.argmin)(x, axis=axis).astype(np.int64)


def scan(fn: str, x: np.ndarray, axis: int) -> np.ndarray:
    """Inclusive prefix sums (cumsum) or products (cumprod) along `axis`."""
    with np.errstate(all="ignore"):
        return (np.cumsum if fn == "cumsum" else np.cumprod)(x, axis=axis)


def softmax(x: np.ndarray, axis: tuple[int, ...], empty: float = 0.0) -> np.ndarray:
    """`empty`: the value on a row whose exponentials sum to 0 (ir.empty_row)."""
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, initial=-np.inf, keepdims=True)
        shift = np.where(m == -np.inf, 0.0, m).astype(x.dtype)
        e = np.exp(x - shift)
        s = np.sum(e, axis=axis, keepdims=True)
        return np.where(s == 0, x.dtype.type(empty), e / s)
