"""Grouped-query attention with its fragment rows packed over r x q (compiler/packing.py).

The emitted CUDA runs on the CPU emulator against the float64 reference (the tolerance rule
of test_emulated_library.py), with r x q below, equal to and above a fragment's 16 rows and
not a multiple of it, keys at odd sizes and at chunk multiples, f16 and bf16, with the keys
split (decode partials and their merge) and not; a seeded bug in the rows' decomposition
must fail; a loaded array over the queries alone keeps one axis of rows.
"""

from __future__ import annotations

import re

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import packing
from napkin.compiler.flash import FlashSite
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan
from napkin.runtime import compare, reference

from .conftest import emulate_buffers, library

THOROUGH = pytest.mark.thorough


def _site(p):
    return next(kp.schedule.site for kp in p.kernels if isinstance(kp.schedule.site, FlashSite))


def _check(d, shape, dtype, out=None, **kw):
    inputs = random_inputs(d, shape, 3)
    p = plan(d, "h100", shape, engine="tensor-cores", **kw)
    got = out(p, inputs) if out else run_plan(p, inputs, p.sizes)["O"]
    ref = reference.evaluate(d, inputs)["O"]
    low = reference.evaluate(d, inputs, precision="lowp")["O"]
    return p, compare.check(got, ref, low, dtype, "O")


CASES = [  # r, q, x, dtype, splits of x (None: unsplit), rows packed
    (3, 5, 37, "f16", None, True),        # 15 rows: one short of a fragment
    (8, 3, 64, "bf16", 4, True),          # 24 rows: blocks across r, split, x a chunk multiple
    pytest.param(4, 4, 65, "bf16", None, True, marks=THOROUGH),     # 16 rows
    pytest.param(8, 3, 129, "f16", None, True, marks=THOROUGH),
    pytest.param(3, 5, 131, "bf16", 4, True, marks=THOROUGH),
    pytest.param(4, 4, 128, "f16", 4, True, marks=THOROUGH),
    pytest.param(2, 1, 33, "f16", None, False, marks=THOROUGH),     # q = 1: rows along r
    pytest.param(1, 7, 32, "bf16", 4, False, marks=THOROUGH),       # r = 1: rows along q
]


@pytest.mark.parametrize("r, q, x, dtype, split, packed", CASES)
def test_gqa_packed_rows_emulated(r, q, x, dtype, split, packed):
    d = library("gqa_attention", dtype, d=32)
    over = {"split": {"x": split}} if split else None
    p, verdict = _check(d, {"b": 2, "g": 3, "r": r, "q": q, "x": x}, dtype, overrides=over)
    site = _site(p)
    assert site.packed == (("r", "q") if packed else ())
    assert (p.split is not None) == bool(split)
    assert verdict.ok, verdict.message


def test_a_seeded_bug_in_the_rows_decomposition_fails():
    """Q's copy reads packed row i at q = (i + 1) % size(q) (a permutation: in bounds), its
    output stored at i's own: the emulated output is wrong."""
    d = library("gqa_attention", "f16", d=32)
    shape = {"b": 1, "g": 2, "r": 3, "q": 5, "x": 40}

    def seeded(p, inputs):
        edit = lambda src: re.sub(r"\((pk\d+) % \(int\)\((n\d+)\)\)", r"((\1 + 1) % (int)(\2))",
                                  src, count=1)
        return emulate_buffers(p, inputs, shape, edit=edit)["O"]
    p, verdict = _check(d, shape, "f16", out=seeded)
    assert _site(p).packed == ("r", "q")
    assert not verdict.ok


BIASED = ("axis b, g, r, q, x\naxis d = 32\n"
          "in Q[b g r q d]: bf16\nin K[b g x d]: bf16\nin V[b g x d]: bf16\n"
          "in B[q x]: f32\n"
          "S[b g r q x] = Q * K / sqrt(size(d)) + B\n"
          "P[b g r q x] = softmax[x](S)\nO[b g r q d] = P * V\nout O: bf16")


def test_a_loaded_array_over_the_queries_alone_keeps_one_axis_of_rows():
    """A bias `B[q x]` read without r: its rows stay one axis (why_not says so: the model
    would count B over the packed rows), and the kernel still matches the reference. (A mask
    of indices over q alone packs: test_gqa_packed_causal.py.)"""
    d = napkin.load(BIASED)
    p, verdict = _check(d, {"b": 1, "g": 2, "r": 4, "q": 3, "x": 37}, "bf16")
    site = _site(p)
    assert site.packed == () and site.row == "r"
    kp = next(kp for kp in p.kernels if kp.schedule.site is site)
    why = packing.why_not(p.graph, kp.kernel, ("r", "q"), site.q, site.out)
    assert why is not None and "`q` without `r`" in why
    assert verdict.ok, verdict.message


def _predicted(q: int) -> tuple[float, FlashSite]:
    d = library("gqa_attention", "f16", d=128)
    p = plan(d, "h100", {"b": 8, "g": 8, "r": 4, "q": q, "x": 4096})
    return sum(float(kp.cost.time) for kp in p.kernels), _site(p)


def test_the_planner_packs_r_x_q_and_prices_k_v_once_per_group():
    """At q = 4 (r = 4) the rows are r x q = 16 and the plan is predicted within 5% of q = 1's
    (K and V read once per (b, g) group, as with one query a head); unpacked it was 1.7x
    (80.7 us against 47.3 us, model)."""
    packed, site = _predicted(4)
    one, single = _predicted(1)
    assert site.packed == ("r", "q") and site.row == "(r q)" and single.packed == ()
    assert abs(packed / one - 1) < 0.05, (packed, one)


def test_explain_says_the_rows_are_packed():
    from napkin.explain import render_text, report
    d = library("gqa_attention", "f16", d=128)
    text = render_text(report(plan(d, "h100", {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096})))
    assert "rows packed: r x q = 4 x 4 = 16, in blocks of 16" in text
    assert "over (r q) x d" in text


def test_the_schedule_interpreter_runs_packed_rows():
    """runtime/interpret.py runs a packed kernel's rows whole (each row is independent)."""
    from napkin.runtime.interpret import interpret
    d = library("gqa_attention", "f16", d=32)
    interpreted = lambda p, inputs: interpret(p, inputs)["O"]
    p, verdict = _check(d, {"b": 2, "g": 1, "r": 8, "q": 3, "x": 45}, "f16", out=interpreted,
                        overrides={"split": {"x": 3}})
    assert _site(p).packed == ("r", "q") and p.split is not None
    assert verdict.ok, verdict.message


@pytest.mark.parametrize("hint", [{"group": {"q": 16}}, {"group": {"q": 4}, "stream": {"x": 32}}])
def test_a_hint_on_a_packed_axis_keeps_one_axis_of_rows(hint):
    """`--group q=16` names q as the block's rows: the plan is FlashAttention-2 over q, as
    before rows were packed (the packed site cannot honour it: without this, fusion fell back
    to three kernels, 108 us against 80.7, model), and the emulated kernel matches the oracle."""
    d = library("gqa_attention", "f16", d=128)
    p = plan(d, "h100", {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096}, hint)
    assert len(p.kernels) == 1 and isinstance(_site(p), FlashSite)
    assert _site(p).packed == () and _site(p).row == "q"
    small = library("gqa_attention", "f16", d=32)
    p, verdict = _check(small, {"b": 1, "g": 2, "r": 3, "q": 4, "x": 37}, "f16", overrides=hint)
    assert _site(p).packed == () and _site(p).row == "q"
    assert verdict.ok, verdict.message


@pytest.mark.parametrize("shape", [
    {"b": 1, "h": 5, "q": 1, "x": 41},      # q = 1: the rows would have run along h
    {"b": 3, "h": 2, "q": 1, "x": 23},      # ... now along b
])
def test_rows_never_run_along_an_axis_the_values_vary_along(shape):
    """`Q[h b q d]`, `K[x d]`, `V[h x e]`: h is Q's and not K's, but V varies along it, so a
    block's one tile of values cannot serve rows along h (they took row h's P times head 0's
    values: max error 3.2 at q = 1). The rows run along Q's axes K and V both lack (b, q;
    flash.own_rows) and h is a batch axis, one position per block."""
    d = napkin.load("axis b, h, q, x\naxis d = 16\naxis e = 8\nin Q[h b q d]: f16\n"
                    "in K[x d]: f16\nin V[h x e]: f16\n"
                    "S[b h q x] = where(x < q + 3, Q * K, -inf)\nP[b h q x] = softmax[x](S)\n"
                    "O[b q h e] = P * V\nout O: f16\n")
    p, verdict = _check(d, shape, "f16")
    site = _site(p)
    assert "h" in site.batch and set(packing.parts(site.row)) <= {"b", "q"}
    assert verdict.ok, verdict.message
