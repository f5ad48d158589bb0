"""Peeled row copies (compiler/copies.py, codegen/peeled.py): a staged row whose size no
vector divides, so that its rows start at addresses no vector width divides, is copied 16
bytes at a time all the same, its head and tail value by value. Emulated against the float64
reference at odd sizes (every row's head another, a last chunk shorter than the head, a row
past the array's end), f16, bf16 and f32; the plan's decision read by the cost model; the
seeded bugs the emulator catches (a misaligned 16-byte load is an error there)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from napkin.compiler import copies, issue_simt
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan
from napkin.runtime import compare
from napkin.runtime.emulate import EmulatorError

from .conftest import emulate_buffers, library

# cross_entropy with its chunk of v staged (no split): rows of 256 values in 2-row tiles
STAGED = {"split": {"v": 1}, "group": {"t": 2}, "stream": {"v": 256}, "lanes": {"v": 8}}
# a row reduction's whole row (or its chunk) in one warp: the rows are a runtime size long
WARP = {"lanes": {"c": 32}}


def _ce_inputs(t: int, v: int, dtype: str) -> dict:
    rng = np.random.default_rng(t * 7 + v)
    z = (rng.standard_normal((t, v)) * 3).astype({"f16": np.float16, "f32": np.float32,
                                                  "bf16": np.float32}[dtype])
    return {"Z": z, "label": rng.integers(0, v, t).astype(np.int32)}


def _check(d, p, inputs):
    out = run_plan(p, inputs, p.sizes)
    for array, verdict in compare.against_reference(d, inputs, out, p).items():
        assert verdict.ok, (array, verdict.message)


@pytest.mark.parametrize("dtype, v", [
    ("f16", 50257), ("bf16", 263), ("f32", 257),
    *[pytest.param(dt, v, marks=pytest.mark.thorough)
      for dt in ("f16", "bf16", "f32") for v in (257, 263, 1001, 50257)
      if (dt, v) not in (("f16", 50257), ("bf16", 263), ("f32", 257))]])
def test_cross_entropy_rows_copied_peeled_match_the_reference(dtype, v):
    """5 rows (the last tile's second row past the end), heads r * v mod the vector's values
    all different; v = 257: the last chunk's one value is shorter than every head but 0."""
    d = library("cross_entropy", dtype)
    p = plan(d, "h100", {"t": 5, "v": v}, STAGED)
    (kp,) = p.kernels
    assert kp.schedule.peels == (0,) and kp.schedule.vector(0) == 16 // (4 if dtype == "f32"
                                                                        else 2)
    _check(d, p, _ce_inputs(5, v, dtype))


@pytest.mark.parametrize("v", [1, 7, 8, 9, 15, 17, 37])
def test_cross_entropy_short_rows_are_copied_unpeeled_and_match(v):
    """Rows shorter than the peel pays for (copies.row_copy): a value a copy, as before."""
    d = library("cross_entropy", "f16")
    p = plan(d, "h100", {"t": 5, "v": v}, STAGED)
    assert all(not kp.schedule.peels for kp in p.kernels)
    _check(d, p, _ce_inputs(5, v, "f16"))


@pytest.mark.parametrize("name, c, overrides", [
    ("softmax", 131, WARP),                         # a chunk of 131 (one), one warp a row
    ("layernorm", 1001, WARP),                      # X, gamma and beta: rows of a runtime size
    pytest.param("softmax", 1001, {**WARP, "stream": {"c": 256}}, marks=pytest.mark.thorough),
    pytest.param("rmsnorm", 1001, WARP, marks=pytest.mark.thorough)])
def test_row_reductions_with_peeled_rows_match_the_reference(name, c, overrides):
    d = library(name, "f16")
    p = plan(d, "h100", {"r": 5, "c": c}, overrides)
    (kp,) = p.kernels
    assert 0 in kp.schedule.peels
    rng = np.random.default_rng(c)
    inputs = {s.name: rng.standard_normal(tuple(p.sizes[a] for a in s.axes)).astype(np.float16)
              for s in d.inputs}
    _check(d, p, inputs)


def test_the_decision_is_the_plans_and_the_models():
    """Peeled where no vector divides the size and the row is long enough to pay for its head
    and tail; the model's copy cost is the one `row_copy` decides (issue_simt._copy)."""
    assert copies.peeled(50257, 256, 2) and copies.peeled(50257, 256, 4)
    assert not copies.peeled(50256, 256, 2)        # 16-byte vectors without peeling
    assert not copies.peeled(50257, 16, 2)         # too short
    assert not copies.peeled(50257, 256, 1)        # (bytes: not peeled)
    w, peel, cost = copies.row_copy(4, 256, 50257, 2, 32, True, True, True)
    assert (int(w), bool(peel)) == (8, True)
    assert cost == 4 * (copies.COPY_ROW_ONCE + copies.COPY_EACH + copies.COPY_PEEL)
    assert int(copies.peel_pitch(256, 8)) == 264 and int(copies.peel_pitch(131, 8)) == 144
    w, peel, _ = copies.row_copy(1, 37, 37, 2, 32, True, True, True)
    assert (int(w), bool(peel)) == (1, False)      # 2 rounds of values beat the peel's setup
    # the model prices the copy the schedule records (per candidate: chunks 64 and 256)
    z = SimpleNamespace(axes=("t", "v"), bytes=2)
    choice = SimpleNamespace(stream=("v", np.array([64.0, 256.0])))
    priced = issue_simt._copy(z, choice, {"t": 5, "v": 50257}, {"t": 4, "v": 1}, 32)
    for chunk, price in zip((64, 256), priced):
        w, peel = copies.width(("t", "v"), {"t": 4, "v": chunk}, {"t": 5, "v": 50257}, 2, 32,
                               True)
        assert (w, peel) == ((8, True) if chunk == 256 else (1, False))
        assert price == copies.row_copy(4, chunk, 50257, 2, 32, True, True, True)[2]
    d = library("cross_entropy", "f16")
    p = plan(d, "h100", {"t": 5, "v": 50257}, STAGED)
    assert p.kernels[0].schedule.peeled(0) == 8 and p.kernels[0].schedule.peeled(1) == 0


def _peeled_softmax():
    d = library("softmax", "f16")
    p = plan(d, "h100", {"r": 5, "c": 131}, WARP)
    assert p.kernels[0].schedule.peels == (0,)
    x = np.random.default_rng(3).standard_normal((5, 131)).astype(np.float16)
    return d, p, {"X": x}


def test_a_copy_at_a_row_head_left_out_is_a_misaligned_load_in_the_emulator():
    """Seeded: the head taken as 0 (the row's start taken to be aligned): the 16-byte loads
    then read at addresses 16 does not divide, which the emulator refuses, as a GPU faults."""
    _, p, inputs = _peeled_softmax()
    with pytest.raises(EmulatorError, match="16-byte vector"):
        emulate_buffers(p, inputs, p.sizes, edit=lambda s: s.replace(
            "const int hd = (int)(", "const int hd = 0 * (int)("))


def test_reads_without_the_rows_head_are_caught():
    """Seeded: the reads leave out the row's head (the copy shifts the row by it)."""
    d, p, inputs = _peeled_softmax()
    out = emulate_buffers(p, inputs, p.sizes, edit=lambda s: s.replace("& 15) / 2)]",
                                                                       "& 0) / 2)]"))
    verdicts = compare.against_reference(d, inputs, out, p)
    assert not all(v.ok for v in verdicts.values())


def test_an_offset_pointer_is_peeled_from_its_own_address():
    """A view's rows (X[1:] of a larger array, say) reach the kernel as an offset pointer: the
    heads are the addresses', not the positions' (here X starts 3 values past the buffer's
    aligned start, the kernel edited to read it there: the rows 0 .. 3 of 4 it is told of)."""
    d, p, _ = _peeled_softmax()
    rng = np.random.default_rng(4)
    buffer = rng.standard_normal((5, 131)).astype(np.float16)
    view = buffer.reshape(-1)[3:3 + 4 * 131].reshape(4, 131)
    out = emulate_buffers(p, {"X": buffer}, p.sizes, edit=lambda s: s.replace(
        "{\n  NAPKIN_DYNAMIC_SMEM(smem);", "{\n  p0 += 3; n0 -= 1;\n  NAPKIN_DYNAMIC_SMEM(smem);"))
    verdicts = compare.against_reference(d, {"X": view}, {"Y": out["Y"][:4]})
    assert all(v.ok for v in verdicts.values()), verdicts
