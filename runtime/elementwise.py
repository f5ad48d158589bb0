"""NumPy meaning of every elementwise function and reduction of the language.

Shared by the reference executor and the schedule interpreter, so both agree by
construction on what each function means (NaN propagates through maximum and
minimum; a fully masked softmax row is 0; logsumexp of an empty or fully masked
row is -inf).
"""

from __future__ import annotations

import numpy as np

_SQRT_2_OVER_PI = np.sqrt(2.0 / np.pi)


def _sigmoid(x):
    # exp of a non-positive argument never overflows
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z)).astype(np.result_type(x, np.float32))


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


MAP = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "neg": np.negative,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or, "not": np.logical_not,
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh, "sigmoid": _sigmoid,
    "relu": lambda x: np.where(x > 0, x, np.where(np.isnan(x), x, 0.0)).astype(x.dtype),
    "gelu": _gelu, "silu": lambda x: x * _sigmoid(x), "abs": np.abs,
    "maximum": np.maximum, "minimum": np.minimum,
    "where": np.where,
}


def apply(fn: str, args: list[np.ndarray]) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(MAP[fn](*args))


def reduce(fn: str, x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    """Reduce along the given dimensions."""
    with np.errstate(all="ignore"):
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


def softmax(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    with np.errstate(all="ignore"):
        m = np.max(x, axis=axis, initial=-np.inf, keepdims=True)
        shift = np.where(m == -np.inf, 0.0, m).astype(x.dtype)
        e = np.exp(x - shift)
        s = np.sum(e, axis=axis, keepdims=True)
        return np.where(s == 0, x.dtype.type(0), e / s)
