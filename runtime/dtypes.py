"""Storage dtypes as NumPy dtypes (bf16 through ml_dtypes), and rounding to them."""

from __future__ import annotations

import ml_dtypes
import numpy as np

NUMPY: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}
# Bits of precision (mantissa + implicit bit): orders dtypes from least to most precise.
PRECISION = {"bf16": 8, "f16": 11, "f32": 24}
# Unit roundoff of each dtype.
EPS = {name: float(ml_dtypes.finfo(dt).eps) for name, dt in NUMPY.items()}


def numpy_dtype(name: str) -> np.dtype:
    return NUMPY[name]


def name_of(dtype) -> str | None:
    """napkin's name for a NumPy dtype, or None."""
    dtype = np.dtype(dtype)
    for name, dt in NUMPY.items():
        if dt == dtype:
            return name
    return None


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """Round to the storage dtype and back to the array's own float dtype."""
    return np.asarray(x).astype(NUMPY[name]).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def lowest(names) -> str:
    """The least precise of some dtype names (f32 when there are none)."""
    names = [n for n in names if n in PRECISION]
    return min(names, key=PRECISION.__getitem__) if names else "f32"
