"""What `napkin run` and `napkin.run` are given, checked before anything is allocated: sizes
against the language's limit and the machine's memory, npz headers against the bytes they
hold, .npy files, dtypes (converted only when exact, the same on every path), bf16 round
trips through --save and --inputs, and empty arrays through compiled kernels."""

from __future__ import annotations

import io
import zipfile

import ml_dtypes
import numpy as np
import pytest

import napkin
from napkin.cli import main
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import checks, reference

DOUBLE = "axis r, c\nin X[r c]: {dt}\nY[r c] = X * 2\nout Y: {dt}\n"


def _err(capsys, args, status):
    capsys.readouterr()
    assert main(args) == status
    return capsys.readouterr().err


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_an_npy_file_is_the_input_of_a_one_input_diagram(tmp_path, rng, capsys):
    x = rng.standard_normal((7, 33)).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", "softmax", "--inputs", str(tmp_path / "x.npy"),
                 "--save", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as z:
        y = z["Y"]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), _softmax(x.astype(np.float64)), atol=2e-3)
    err = _err(capsys, ["run", "matmul", "--inputs", str(tmp_path / "x.npy")], 1)
    assert "N0806" in err and "2 inputs" in err and "Traceback" not in err


def _npz_with_header(path, shape, payload=b"\0" * 64):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f2", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("X.npy", buf.getvalue() + payload)


@pytest.mark.parametrize("shape, says", [((10**6, 10**6), "holds only"),
                                         ((2**40 + 1, 1), "more than the limit")])
def test_an_npz_header_is_checked_before_anything_is_read(tmp_path, capsys, shape, says):
    _npz_with_header(tmp_path / "x.npz", shape)
    err = _err(capsys, ["run", "softmax", "--inputs", str(tmp_path / "x.npz")], 1)
    assert "N0806" in err and says in err and "MemoryError" not in err


def test_shapes_past_memory_or_the_limit_are_refused_naming_the_axis(capsys, monkeypatch):
    monkeypatch.setattr(checks, "memory_bytes", lambda: 16 * 10**9)
    err = _err(capsys, ["run", "softmax", "--shape", "r=100000000000,c=4"], 1)
    assert "N0310" in err and "r=100,000,000,000" in err and "`r`" in err
    err = _err(capsys, ["run", "softmax", "--shape", "r=1099511627777,c=4"], 2)
    assert "N0804" in err and "1,099,511,627,776" in err
    err = _err(capsys, ["check", "softmax", "-D", "c=1099511627777"], 2)
    assert "N0804" in err and "1,099,511,627,776" in err
    for digits in ("99999999999999999999", "9" * 100000):     # whole numbers, too large
        err = _err(capsys, ["run", "softmax", "--shape", f"r={digits},c=4"], 2)
        assert "N0804" in err and "larger than the limit 1,099,511,627,776" in err
        assert len(err) < 1000                                  # (the digits not all shown)
    with pytest.raises(NapkinError) as exc:
        napkin.load("softmax", c=2**40 + 1)
    assert exc.value.code == "N0304" and "1,099,511,627,776" in str(exc.value)


def test_an_array_past_the_limit_is_refused_before_any_copy():
    huge = np.broadcast_to(np.float16(1), (2**40 + 1, 1))    # no memory behind it
    with pytest.raises(NapkinError) as exc:
        napkin.run("softmax", huge)
    assert exc.value.code == "N0308" and "`r`" in str(exc.value)


def test_outputs_past_memory_are_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(checks, "memory_bytes", lambda: 10**9)
    outer = "axis a, b\nin X[a]: f32\nin Y[b]: f32\nZ[a b] = X * Y\nout Z: f32"
    x = np.ones(20_001, np.float32)
    for call in (lambda: napkin.run(outer, x, x),
                 lambda: napkin.compile(outer, backend="interpret")(x, x)):
        with pytest.raises(NapkinError) as exc:
            call()
        assert exc.value.code == "N0310" and "`Z` (a=20,001, b=20,001" in str(exc.value)


def _three_paths(tmp_path, text, x):
    """What napkin.run, a compiled kernel and `napkin run --inputs` make of the input `x`."""
    path = tmp_path / "d.napkin"
    path.write_text(text)
    np.savez(tmp_path / "in.npz", X=x)
    out = []
    for call in (lambda: napkin.run(text, x)[0],
                 lambda: napkin.compile(text, backend="reference")(x)[0]):
        try:
            out.append(call())
        except NapkinError as exc:
            out.append(exc.code)
    code = main(["run", str(path), "--inputs", str(tmp_path / "in.npz"),
                 "--save", str(tmp_path / "out.npz")])
    if code == 0:
        with np.load(tmp_path / "out.npz") as z:
            out.append(z["Y"])
    else:
        out.append(code)
    return out


@pytest.mark.parametrize("x", [np.array([[2**62, 1, 3]], np.int64),
                               np.array([[0.1, 1.0, 3.0]], np.float64),
                               np.array([[70000.0, 1.0, 3.0]], np.float32)])
def test_inexact_conversions_are_refused_on_every_path(tmp_path, capsys, x):
    run, compiled, cli = _three_paths(tmp_path, DOUBLE.format(dt="f16"), x)
    assert run == compiled == "N0405" and cli == 1
    assert "N0405" in capsys.readouterr().err


@pytest.mark.parametrize("x", [np.array([[-3, 0, 7, 2047]], np.int64),
                               np.array([[True, False, True, True]]),
                               np.array([[0.5, -1.25, 3.0, 16384.0]], np.float64)])
def test_exact_conversions_are_made_on_every_path(tmp_path, x):
    results = _three_paths(tmp_path, DOUBLE.format(dt="f16"), x)
    expected = (2 * x.astype(np.float64)).astype(np.float16)      # doubling is exact in f16
    for got in results:
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, expected)


def test_bf16_round_trips_through_save_and_inputs(tmp_path, capsys):
    path = tmp_path / "d.napkin"
    path.write_text(DOUBLE.format(dt="bf16"))
    assert main(["run", str(path), "--shape", "r=5,c=17", "--seed", "3",
                 "--save", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as z:
        y = z["Y"]
    assert y.dtype == np.dtype("V2")                  # what .npy can store of bf16
    np.savez(tmp_path / "again.npz", X=y)
    assert main(["run", str(path), "--inputs", str(tmp_path / "again.npz"),
                 "--save", str(tmp_path / "z.npz")]) == 0
    with np.load(tmp_path / "z.npz") as z:
        twice = z["Y"].view(ml_dtypes.bfloat16)
    y = y.view(ml_dtypes.bfloat16)
    assert np.abs(y.astype(np.float64)).max() > 0.1
    np.testing.assert_array_equal(twice.astype(np.float64), 2 * y.astype(np.float64))


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_empty_arrays_run_through_compiled_kernels(backend, rng):
    x = np.zeros((0, 5), np.float16)
    (y,) = napkin.compile("softmax", backend=backend)(x)
    assert y.shape == (0, 5) and y.dtype == np.float16
    a = rng.standard_normal((3, 0)).astype(np.float16)
    b = rng.standard_normal((0, 9)).astype(np.float16)
    (c,) = napkin.compile("matmul", backend=backend)(a, b)
    expected = reference.evaluate(napkin.load("matmul"), {"A": a, "B": b})["C"]
    assert c.shape == (3, 9) and np.array_equal(expected, np.zeros((3, 9)))
    np.testing.assert_array_equal(c.astype(np.float64), expected)
