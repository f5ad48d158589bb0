"""Schedule hints that fix thread tiles, sizes past the axis, and the errors of hints that
leave no tiling: each at the hint's line with a hint that would fit."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin import pipeline
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.sources import library_source
from napkin.runtime import reference
from napkin.runtime.interpret import interpret

SHAPE = {"b": 2, "h": 3, "q": 37, "x": 45}


def hinted(*hints, name="attention"):
    text = library_source(name).text.rstrip("\n") + "\n" + "\n".join(hints) + "\n"
    return napkin.load(Source("hinted.napkin", text)), text.count("\n") - len(hints) + 1


def thread_tile(p, axis):
    return dict(p.kernels[0].choice.thread)[axis]


@pytest.mark.parametrize("hint, axis", [("group q by 2 at registers", "q"),
                                        ("group b by 2 at registers", "b")])
def test_a_thread_tile_on_an_axis_without_reuse_plans(hint, axis):
    """The softmax-only kernel fusion weighs has no reuse of q or b: its block's group was
    pinned to 1, under the hinted thread tile, and the plan failed with N0603."""
    d, _ = hinted(hint)
    p = plan(d, "h100", SHAPE)
    # (one kernel, or two where S through global memory prices as low: `group b` since the
    # CUDA-core refit, issue_simt.py, 6.44 us apart against 6.47 fused, model)
    assert all(dict(kp.choice.thread)[axis] == 2 for kp in p.kernels) and len(p.kernels) <= 2
    rng = np.random.default_rng(5)
    inputs = {n: rng.uniform(-1, 1, s).astype(np.float16) for n, s in
              (("Q", (2, 3, 37, 64)), ("K", (2, 3, 45, 64)), ("V", (2, 3, 45, 64)))}
    got, ref = interpret(p, inputs)["O"], reference.evaluate(d, inputs)["O"]
    np.testing.assert_allclose(got, ref, atol=1e-12)


def test_a_size_past_the_axis_means_the_whole_axis():
    d, _ = hinted("group b by 1000 at registers", "group h by 1000 at registers")
    p = plan(d, "h100", SHAPE)
    assert thread_tile(p, "b") == 2 and thread_tile(p, "h") == 3


def errors_of(d, shape):
    with pytest.raises(NapkinError) as exc:
        plan(d, "h100", shape)
    return exc.value.diagnostics[0]


def test_contradicting_hints_are_an_error_at_a_hint():
    d, line = hinted("group q by 2", "group q by 8 at registers")
    e = errors_of(d, SHAPE)
    assert e.code == "N0603" and "with these schedule hints" in e.message
    assert e.span.line == line and "at most its block's group" in e.help


def test_hints_too_large_together_suggest_sizes_that_fit_together():
    d, line = hinted("group q by 1000 at registers", "group h by 1000 at registers")
    e = errors_of(d, {**SHAPE, "h": 300, "q": 157})
    assert e.code == "N0603" and e.span.line == line
    assert "`group q by" in e.help and "and `group h by" in e.help and "would fit" in e.help
    # the sizes it suggests do fit
    sizes = dict(s.split(" by ") for s in
                 e.help.replace("`", "").replace(" at registers", "").replace("group ", "")
                 .split(" (or less)")[0].split(" and "))
    fixed, _ = hinted(*(f"group {a} by {n} at registers" for a, n in sizes.items()))
    plan(fixed, "h100", {**SHAPE, "h": 300, "q": 157})


def test_a_thread_tile_hint_fixes_its_axis_only():
    """The other axes' thread tiles are still searched (they were pinned to 1)."""
    d, _ = hinted("group n by 2 at registers", name="matmul")
    p = plan(d, "h100", {"m": 1024, "n": 1024, "k": 1024})
    assert thread_tile(p, "n") == 2 and thread_tile(p, "m") > 1


TWO_ROWS = """axis r, c, e
in X[r c]: f32
in Z[r e]: f32
A[r] = sum[c](X)
B[r] = max[e](Z)
Y[r] = A + B
out Y: f32
stream c by 256
stream e by 128
"""


def test_stream_hints_on_two_statements_keep_them_apart():
    """Two statements, each reducing its own axis with its own stream hint: fusion put them in
    one candidate kernel and the hints' resolution refused it (N0604 "kernel k? can stream one
    axis"), failing the whole plan. Fusion now keeps them apart, each streamed as hinted, and
    the plan runs on the emulator against the float64 reference; one statement reducing both
    hinted axes is refused, naming both hints."""
    d = napkin.load(TWO_ROWS)
    p = plan(d, "h100", {"r": 64, "c": 4096, "e": 4096})
    streamed = {kp.schedule.stream[0] for kp in p.kernels if kp.schedule.stream}
    assert {"c"} <= streamed and len(p.kernels) >= 2
    rng = np.random.default_rng(4)
    X = rng.standard_normal((5, 700)).astype(np.float32)
    Z = rng.standard_normal((5, 300)).astype(np.float32)
    (Y,) = napkin.run(d, X, Z, backend="emulate", target="h100")
    want = X.astype(np.float64).sum(1) + Z.astype(np.float64).max(1)
    np.testing.assert_allclose(Y, want, rtol=1e-5, atol=1e-4)
    both = napkin.load("axis r, c, e\nin X[r c e]: f32\nY[r] = sum[c e](X)\nout Y: f32\n"
                       "stream c by 256\nstream e by 128\n")
    with pytest.raises(NapkinError) as exc:
        plan(both, "h100", {"r": 64, "c": 512, "e": 512})
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0604" and "`stream e` and `stream c`" in diag.message
    assert diag.span is not None and "k?" not in diag.message


@pytest.mark.parametrize("hints", [{"lanes": {"x": 32}, "stream": {"x": 16}},
                                   {"lanes": {"d": 256}, "group": {"q": 64}}])
def test_a_lanes_hint_in_a_fusion_candidate_that_does_not_fit(hints):
    """A lanes hint in a candidate kernel no tiling fits: the search for a hinted size that
    would fit halved it too, and had no decision to put it in (KeyError ('lanes', 1) from
    every plan of attention with `--lanes x=32 --stream x=16`). The candidate is priced
    infeasible, the plan keeps the hints, and it computes the float64 reference's values."""
    d = napkin.load("attention")
    p = pipeline.plan(d, pipeline.Options.make(
        target="h100", shape={"b": 1, "h": 2, "q": 17, "x": 33}, **hints))
    (axis, ways), = hints["lanes"].items()
    assert any(kp.choice.split == (axis, ways) for kp in p.kernels)
    rng = np.random.default_rng(6)
    inputs = {n: rng.uniform(-1, 1, s).astype(np.float16) for n, s in
              (("Q", (1, 2, 17, 64)), ("K", (1, 2, 33, 64)), ("V", (1, 2, 33, 64)))}
    got, ref = interpret(p, inputs)["O"], reference.evaluate(d, inputs)["O"]
    np.testing.assert_allclose(got, ref, atol=2e-3)
