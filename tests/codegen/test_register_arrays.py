"""A CUDA-core thread's register array over an axis the kernel does not weave (here the
scores S[t s] = X * Y streamed over m and reduced by a logsumexp over s in the same kernel:
S over all of s, `st0[37]`) stays in registers only where every index into it is a constant
once nvcc unrolls: with s dynamic, the loops to the run-time size indexed it at run time,
and nvcc put it in local memory (113 LDL and 119 STL in the static SASS, the kernel's issue
count 5.8x the model's). The plan decides it (compiler/register_arrays.py: Model.held_axes,
runtime_indexed; each walk of such an axis in constant unrolled trips of the planned extent,
guarded by the run-time size), the lowering checks it (accum.local_index, N0604).
Emulated against float64 at odd sizes."""

from __future__ import annotations

import pytest

import napkin
from napkin import pipeline
from napkin.codegen.lower import lower
from napkin.commands.run import random_inputs
from napkin.compiler import register_arrays
from napkin.compiler.schedule import SIMT
from napkin.diagrams.diagnostics import NapkinError
from napkin.pipeline import run_plan
from napkin.runtime import compare

TEXT = """axis t, s, m
in X[t m]: f16
in Y[s m]: f16
S[t s] = X * Y
L[t] = logsumexp[s](S)
out L: f32
"""
SIZES = {"t": 37, "s": 37, "m": 64}


def _plan(sizes=SIZES, **kw):
    d = napkin.load(TEXT)
    return d, pipeline.plan(d, pipeline.Options.make(target="h100", shape=sizes,
                                                      engine="cuda-cores", **kw))


@pytest.fixture(scope="module")
def planned():
    return _plan()


def test_the_decision_sees_a_register_array_over_a_dynamic_axis(planned):
    _, p = planned
    (kp,) = p.kernels
    assert kp.schedule.engine == SIMT and kp.schedule.stream[0] == "m"
    assert kp.model.held_axes == {"s"}
    assert register_arrays.runtime_indexed(kp.model) == {"s"}
    # the walk of s: its planned 37 positions, unrolled
    assert register_arrays.constant_trips(kp.model, "s", p.sizes["s"], 1) == 37
    assert register_arrays.constant_trips(kp.model, "t", p.sizes["t"], 1) is None


def test_fixed_it_is_indexed_by_static_loops():
    d = napkin.load(TEXT.replace("axis t, s, m", "axis t, m\naxis s = 37"))
    p = pipeline.plan(d, pipeline.Options.make(target="h100", shape=SIZES, engine="cuda-cores"))
    (kp,) = p.kernels
    assert kp.model.held_axes == {"s"} and not register_arrays.runtime_indexed(kp.model)
    assert register_arrays.constant_trips(kp.model, "s", 37, 1) is None   # (unrolled already)
    # past what a static loop unrolls by itself (64 by ones, 8 by the lanes' stride)
    assert register_arrays.constant_trips(kp.model, "s", 97, 1) == 97
    assert register_arrays.constant_trips(kp.model, "s", 37, 32) is None
    assert register_arrays.constant_trips(kp.model, "s", 300, 32) == 10
    assert register_arrays.constant_trips(kp.model, "t", 97, 1) is None    # (no array over t)


def test_the_lowering_checks_the_decision(planned, monkeypatch):
    """With the decision taken away, the walks of s loop to the run-time size: the lowering
    refuses to index the scores' register array with their position."""
    monkeypatch.setattr(register_arrays, "constant_trips", lambda *a, **k: None)
    with pytest.raises(NapkinError) as exc:
        lower(planned[1])
    assert exc.value.code == "N0604" and "register array over `s`" in exc.value.diagnostics[0].message


@pytest.mark.thorough       # (NVRTC and cuobjdump: some 3 s; the lowering's check is the default)
def test_no_local_memory_in_the_sass(planned):
    """The kernel's static SASS (NVRTC, cuobjdump; no GPU) has no LDL or STL (113 and 119
    before)."""
    from ..compiler.test_simt_sass import _need_disassembler
    from napkin.runtime import sass
    _need_disassembler()
    _, p = planned
    made = pipeline.through(p, "plan", "binary", pipeline.Options.make(target="h100"))
    ops = sass.count_opcodes(sass.disassemble(made["binary"].cubin))
    assert ops["LDL"] == 0 and ops["STL"] == 0, ops
    assert ops["FFMA"] + ops["HFMA2"] > 0      # (the kernel is there)


@pytest.mark.parametrize("sizes, kw", [
    pytest.param(SIZES, {}, marks=pytest.mark.thorough),    # (run at s = 30 below, by default)
    ({"t": 29, "s": 33, "m": 17}, {}),
    pytest.param({"t": 37, "s": 37, "m": 64}, {"stream": {"m": 16}},   # s over 32 lanes
                 marks=pytest.mark.thorough),
    pytest.param({"t": 5, "s": 63, "m": 31}, {}, marks=pytest.mark.thorough),
])
def test_matches_float64(sizes, kw):
    d, p = _plan(sizes, **kw)
    (kp,) = p.kernels
    assert "s" in register_arrays.runtime_indexed(kp.model)
    inputs = random_inputs(d, sizes, sizes["s"])
    out = run_plan(p, inputs, dict(sizes))
    for name, v in compare.against_reference(d, inputs, out, plan=p).items():
        assert v.ok, (sizes, name, v.message)


def test_a_run_past_the_planned_extent_is_refused(planned):
    """The arrays hold the planned 37 positions of s: a run at fewer works (above: planned at
    37, the walks guarded), one at more is refused (N0308; it overran st0 before)."""
    d, p = planned
    from napkin.pipeline import lowered
    assert lowered(p)[0].held == (("s", 37),)
    sizes = {**SIZES, "s": 41}
    with pytest.raises(NapkinError) as exc:
        run_plan(p, random_inputs(d, sizes, 0), sizes)
    assert exc.value.code == "N0308" and "s = 41" in exc.value.diagnostics[0].message
    small = {**SIZES, "s": 30}
    inputs = random_inputs(d, small, 1)
    out = run_plan(p, inputs, small)
    for name, v in compare.against_reference(d, inputs, out, plan=p).items():
        assert v.ok, (name, v.message)
