"""Storage dtypes: the same names, dtypes and epsilons, with ml_dtypes imported only for bf16."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np

from napkin.runtime import dtypes


def test_epsilons_are_ml_dtypes_finfo():
    for name in ("f32", "f16", "bf16"):
        assert dtypes.EPS[name] == float(ml_dtypes.finfo(dtypes.numpy_dtype(name)).eps)


def test_names_and_dtypes_round_trip():
    assert dtypes.numpy_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)
    assert set(dtypes.NUMPY) == {"f32", "f16", "bf16", "i32", "i64", "bool"}
    for name in ("f32", "f16", "bf16", "i32", "i64", "bool"):
        assert dtypes.name_of(dtypes.numpy_dtype(name)) == name
        assert dtypes.name_of(np.zeros(2, dtypes.numpy_dtype(name)).dtype) == name
    assert dtypes.name_of(np.float64) is None and dtypes.name_of("int16") is None
    x = np.array([1 + 2 ** -9], np.float64)
    assert dtypes.round_to(x, "bf16")[0] == 1.0 and dtypes.round_to(x, "f16")[0] == x[0]


def test_inputs_accept_only_their_kind():
    """A float array is never taken for an integer or boolean input (no silent float->int)."""
    assert dtypes.accepts("f16", np.float64) and dtypes.accepts("f32", np.int64)
    assert dtypes.accepts("i32", np.int64) and dtypes.accepts("i64", np.bool_)
    assert not dtypes.accepts("i32", np.float32) and not dtypes.accepts("i64", np.float64)
    assert dtypes.accepts("bool", np.bool_) and not dtypes.accepts("bool", np.int32)


def test_ml_dtypes_loads_only_when_bf16_is_needed():
    code = ("import sys; from napkin.runtime import dtypes; import numpy as np; "
            "dtypes.numpy_dtype('f16'); dtypes.name_of(np.float64); dtypes.round_to(np.ones(2), 'f32'); "
            "print('ml_dtypes' in sys.modules); dtypes.numpy_dtype('bf16'); "
            "print('ml_dtypes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
