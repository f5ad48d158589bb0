"""Storage dtypes as NumPy dtypes (bf16 through ml_dtypes), and rounding to them.

ml_dtypes takes most of a second to import, so it is imported the first time a bf16 dtype is
asked for (or met), not when this module is.
"""

from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np

# Bits of precision (mantissa + implicit bit): orders dtypes from least to most precise.
PRECISION = {"bf16": 8, "f16": 11, "f32": 24}
# Unit roundoff of each dtype (its machine epsilon, 2^(1 - precision), as ml_dtypes.finfo says).
EPS = {name: 2.0 ** (1 - bits) for name, bits in PRECISION.items()}

_PLAIN: dict[str, np.dtype] = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
                               "i32": np.dtype(np.int32), "i64": np.dtype(np.int64),
                               "bool": np.dtype(np.bool_)}
FLOATS = ("f32", "f16", "bf16")
INTEGERS = ("i32", "i64")


@lru_cache(maxsize=1)
def _all() -> dict[str, np.dtype]:
    import ml_dtypes
    return {**_PLAIN, "bf16": np.dtype(ml_dtypes.bfloat16)}


def __getattr__(name):
    if name == "NUMPY":     # every storage dtype by name (imports ml_dtypes)
        return _all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def numpy_dtype(name: str) -> np.dtype:
    return _PLAIN[name] if name in _PLAIN else _all()[name]


def name_of(dtype) -> str | None:
    """napkin's name for a NumPy dtype, or None."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:       # perhaps "bfloat16", a name NumPy knows once ml_dtypes is loaded
        _all()
        dtype = np.dtype(dtype)
    for name, dt in _PLAIN.items():
        if dt == dtype:
            return name
    # a bf16 dtype exists only once ml_dtypes is imported: no need to import it to say no
    if "ml_dtypes" in sys.modules and _all()["bf16"] == dtype:
        return "bf16"
    return None


def accepts(name: str, dtype) -> bool:
    """Whether an array of NumPy `dtype` may be passed for an input declared `name`: floats
    of any precision for a float input (rounded to it), integers (or booleans) for an integer
    input, booleans for a boolean one. A float never becomes an integer silently."""
    kind = np.dtype(dtype).kind
    if name == "bool":
        return kind == "b"
    if name in INTEGERS:
        return kind in "iub"
    return kind in "fiub" or np.dtype(dtype).name == "bfloat16"


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """Round to the storage dtype and back to the array's own float dtype (a value past the
    dtype's largest becomes inf, as the hardware rounds it: no NumPy overflow warning)."""
    return stored(x, name)[0].astype(x.dtype if x.dtype.kind == "f" else np.float64)


def stored(x, name: str) -> tuple[np.ndarray, int]:
    """`x` in storage dtype `name`, and how many of its finite values became infinite there
    (past f16's largest finite value, 65504: IEEE rounding gives inf, as a GPU's conversion
    does). NumPy's own "overflow encountered in cast" is silenced: the caller says it."""
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        y = x.astype(numpy_dtype(name))
    if name not in FLOATS or x.dtype.kind != "f":
        return y, 0
    return y, int(np.count_nonzero(np.isinf(y) & np.isfinite(x)))


def lowest(names) -> str:
    """The least precise of some dtype names (f32 when there are none)."""
    names = [n for n in names if n in PRECISION]
    return min(names, key=PRECISION.__getitem__) if names else "f32"
