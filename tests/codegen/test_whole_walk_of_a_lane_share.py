"""A value a CUDA-core thread holds in registers over the lanes' split axis is the lane's
share of it (accum.extent_of): a reduction over that axis nested in another over it walks the
whole axis in each lane (scalar._walk at step 1) and cannot read it. Below, one CUDA-core
kernel computes Q (a contraction over m), the scores, O and D. Streaming m, Q is the streamed
reduction held over d; O's scores inside D's walk of d sum Q over all of d, so a split of d
would compute Q again from X and Wq at every score (fuzz19's probe: self-attention's
gradient at t=s=37 m=24 h=2 read past the register array, then recomputed Q unpriced). The
planner decides it once (compiler/lanes.whole_walks: it splits no such axis, the schedule
refuses one, the lowering checks it), and a reduction without the streamed axis that the
loop reads is computed once before the pass that reads it (compiler/held_values.py), as the
model prices it.
Emulated against float64 at odd sizes."""

from __future__ import annotations

import math
from collections import Counter

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.scalar import Emitter
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler import lanes
from napkin.compiler.cost import Choice
from napkin.compiler.model import kernel_model
from napkin.compiler.plan import plan
from napkin.compiler.schedule import SIMT
from napkin.compiler.variants import with_choices
from napkin.diagrams.diagnostics import NapkinError
from napkin.pipeline import run_plan
from napkin.runtime import compare

TEXT = """axis t, m, h, s
axis d = 16
in X[t m]: f16
in Wq[m h d]: f16
in K[h s d]: f16
in V[h s d]: f16
in dO[t h d]: f16
Q[h t d] = X * Wq
S[h t s] = Q * K
O[t h d] = softmax[s](where(s <= t, S, -inf)) * V
D[t h] = sum[d](dO * O)
out D: f32
"""
SIZES = {"t": 37, "s": 37, "m": 16, "h": 2}   # (m = 24: two kernels since the small-shape counts)
# streaming m (Q its streamed reduction), d split over 16 lanes: what fuzz19's plan did
SPLIT_D = Choice((("h", 1), ("t", 16)), ("m", 16), (("h", 1), ("t", 1)), ("d", 16))
# streaming the keys, d = 12 split over 8 lanes (ragged), two rows a thread
RAGGED = Choice((("h", 1), ("t", 8)), ("s", 16), (("h", 1), ("t", 2)), ("d", 8))
ODD = {"t": 33, "s": 29, "m": 17, "h": 3}


@pytest.fixture(scope="module")
def planned():
    d = napkin.load(TEXT)
    return d, plan(d, "h100", SIZES)


def _q(p) -> int:
    """Q's contraction (the node the model prices and the lowering holds)."""
    eq = next(e for e in p.graph.graph["equations"] if e.name == "Q")
    return next(n for n in p.kernels[0].kernel.nodes if p.graph.nodes[n]["stmt"] == eq.stmt
                and isinstance(ir.op(p.graph, n), ir.Contract))


def test_the_planner_splits_no_axis_a_nested_reduction_walks_whole(planned):
    _, p = planned
    (kp,) = p.kernels
    g, q = p.graph, _q(p)
    by_stream = {a: kernel_model(g, kp.kernel, a) for a in ("m", "s")}
    assert by_stream["m"].whole_walks == {"d"} and by_stream["m"].held_values == ()
    assert by_stream["s"].whole_walks == frozenset() and by_stream["s"].held_values == ((q, 0),)
    assert kp.schedule.engine == SIMT and kp.schedule.split[0] not in kp.model.whole_walks


def test_a_lanes_split_of_such_an_axis_is_refused(planned):
    with pytest.raises(NapkinError) as exc:
        with_choices(planned[1], [SPLIT_D])
    assert exc.value.code == "N0604" and "nested" in exc.value.diagnostics[0].message


def test_the_lowering_checks_the_decision(planned, monkeypatch):
    """With the decision taken away (whole_walks empty), the lowering refuses to read the
    lanes' shares of Q in a walk of all of d (it computed Q again there, unpriced)."""
    monkeypatch.setattr(lanes, "whole_walks", lambda *a, **k: frozenset())
    p = with_choices(planned[1], [SPLIT_D])
    with pytest.raises(NapkinError) as exc:
        lower(p)
    assert exc.value.code == "N0604" and "holds its share" in exc.value.diagnostics[0].message


def _computed(p) -> Counter:
    """(kernel, node, inside the streamed loop) -> how often the lowering computes it (a
    softmax: its row's statistics, not its probabilities)."""
    counts, compute, lse = Counter(), Emitter._compute, Emitter._lse

    def count(self, n):
        k = getattr(self.ctx, "k", None)
        counts[(k and k.name, n, bool(getattr(self.ctx, "in_chunk", False)))] += 1

    def computing(self, n, op, scope):
        if not isinstance(op, ir.Softmax):
            count(self, n)
        return compute(self, n, op, scope)

    def row(self, n, arg, axes, scope):
        if isinstance(ir.op(self.g, n), ir.Softmax):
            count(self, n)
        return lse(self, n, arg, axes, scope)
    Emitter._compute, Emitter._lse = computing, row
    try:
        lower(p)
    finally:
        Emitter._compute, Emitter._lse = compute, lse
    return counts


def test_the_kernel_computes_q_once_as_the_model_prices_it(planned):
    """The model prices Q once (its work over t h d m, times 1, no streamed axis); the
    lowering computes it once per point of the thread, before the streamed loop over the
    keys, and never inside it (it computed it at every group of keys: ~s/4 times)."""
    _, p = planned
    (kp,) = p.kernels
    q = _q(p)
    (work,) = [w for w in kp.model.work if w.node == q]
    assert work.times == 1 and kp.model.streaming.axis not in work.axes
    counts = _computed(p)
    points = math.prod(kp.schedule.thread_tile().values())
    k = kp.kernel.name
    assert counts[(k, q, True)] == 0 and counts[(k, q, False)] == points, counts
    states = {n for n, _ in kp.model.streaming.reducers}     # (never computed again)
    assert not any(n in states for _, n, _ in counts), counts


@pytest.mark.parametrize("head, choice", [(16, None), (12, RAGGED)])
def test_scores_of_a_held_q_inside_the_keys_loop_match_float64(head, choice):
    """As planned (d = 16 over 16 lanes), and d = 12 over 8 lanes with two rows a thread
    (each lane holds 2 of Q's values a row, the last lanes' second past d: clamped, never
    read), run at two odd shapes."""
    d = napkin.load(TEXT.replace("axis d = 16", f"axis d = {head}"))
    p = plan(d, "h100", SIZES)
    p = with_choices(p, [choice]) if choice else p
    (kp,) = p.kernels
    assert kp.model.held_values == ((_q(p), 0),)
    assert kp.schedule.split == ("d", 16 if choice is None else 8)
    for seed, sizes in enumerate((SIZES, ODD)):
        inputs = random_inputs(d, sizes, seed)
        out = run_plan(p, inputs, {**sizes, "d": head})
        for name, v in compare.against_reference(d, inputs, out, plan=p).items():
            assert v.ok, (sizes, name, v.message)


@pytest.mark.thorough       # (planning the gradient at small sizes: some 20 s a variant)
@pytest.mark.parametrize("variant", ["causal_proj", "full_proj"])
def test_self_attentions_gradient_at_small_sizes_computes_what_the_model_prices(variant):
    """fuzz19's probe: self-attention's gradient planned at t=s=37 m=24 h=2 (d=16) fuses Q,
    the scores, O, D and dQ into one CUDA-core kernel. No kernel splits an axis of its
    model's whole_walks over lanes; no CUDA-core kernel computes a held reduction, or any
    reduction without its streamed axis, inside its streamed loop, or a streamed state again
    (the model prices each once); emulated against
    float64. (Before, in the plan streaming d, a softmax's statistics over the keys were
    computed again at each position of d in the two later passes.)"""
    from ..compiler.self_attention import VARIANTS
    g = napkin.grad(napkin.load(VARIANTS[variant], d=16))
    p = plan(g, "h100", SIZES)
    counts = _computed(p)
    for kp in p.kernels:
        assert not kp.schedule.split or kp.schedule.split[0] not in kp.model.whole_walks
        if kp.schedule.engine != SIMT:
            continue
        k, states = kp.kernel.name, {n for n, _ in kp.model.streaming.reducers}
        assert not any(counts[(k, n, True)] for n, _ in kp.model.held_values), (k, counts)
        assert not any(m == k and n in states for m, n, _ in counts), (k, counts)
        # inside the loop, no reduction without the streamed axis (the model prices it once)
        r, ir_ = kp.model.streaming.axis, p.graph
        assert not [n for m, n, inside in counts if m == k and inside and isinstance(
            ir.op(ir_, n), (ir.Contract, ir.Reduce, ir.Softmax)) and r not in
            ir.type_of(ir_, n).axes + ir.op(ir_, n).axes], (k, counts)
    inputs = random_inputs(g, SIZES, 3)
    out = run_plan(p, inputs, {**SIZES, "d": 16}, timeout_s=600)
    for name, v in compare.against_reference(g, inputs, out, plan=p).items():
        assert v.ok, (name, v.message)


def test_the_model_issue_slots_follow_the_kernels_sass(planned):
    """The model's issue slots beside the static SASS estimate of the emitted kernel
    (benchmarks/model_check.kernel_sass: every loop of a block weighted by its trips; h100,
    no GPU): 3.5x at this tiny shape (6 blocks; the unfused Q kernel at t=512 is 2.9x), where
    the plan streaming m with d split, Q computed again at each score, was 240x (0.032 us
    priced, 7.6 us estimated) and Q computed at each group of keys (no held Q) 6.5x."""
    from ..compiler.test_simt_sass import _module, _need_disassembler
    from napkin import pipeline
    _need_disassembler()
    _, p = planned
    made = pipeline.through(p, "plan", "binary", pipeline.Options.make(target="h100"))
    row = _module("model_check").kernel_sass(p, made, 0)
    model = dict(p.kernels[0].cost.compute_parts)["issue"]
    assert 1 <= row["static_issue_seconds"] / model <= 4.5, (row, model)


@pytest.mark.thorough       # (planning GQA at 37, then two emulated runs: some 20 s)
def test_the_library_kernel_holding_a_reduction_matches_float64():
    """A library kernel that holds a reduction (GQA attention in f32 at 37 on every dynamic
    axis, streaming d in passes: a value of pass 0's states computed before pass 1; the
    planner's choice until the small-shape counts of 2026-12-07, pinned), emulated at 5 and 3
    against float64 (the fuzz corpus's f32 build, tests/fuzz/plans.py)."""
    from ..fuzz.plans import library
    d = library("gqa_attention", "f32")
    p = with_choices(plan(d, "h100", {a: 37 for a, s in d.axes.items() if s is None}), [Choice(
        (("b", 1), ("g", 1), ("q", 32), ("r", 16)), ("d", 16),
        (("b", 1), ("g", 1), ("q", 8), ("r", 8)), ("x", 32))])
    assert any(kp.model.held_values for kp in p.kernels)
    for n in (5, 3):
        sizes = {a: n for a, s in d.axes.items() if s is None}
        inputs = random_inputs(d, sizes, n)
        out = run_plan(p, inputs, sizes, timeout_s=600)
        for name, v in compare.against_reference(d, inputs, out, plan=p).items():
            assert v.ok, (sizes, name, v.message)
