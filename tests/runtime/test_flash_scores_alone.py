"""Row statistics of scores alone on tensor cores: FlashAttention-2 without P V
(compiler/flash_alone.py). `logsumexp[x](Q * K / 4)`, `max[x](...)`, `sum[x](exp(...))` of a
16-bit product with no softmax nor P V were a CUDA-core kernel (or S stored and reduced by a
second one): 51.1 us at b=h=1 q=x=4096 d=16 on h100 (model), now one attention kernel with no
O, 7.39 us. Plans asserted (engine, one kernel, no O, its price against attention's at the same
tiling); the emulated CUDA at odd sizes against the float64 reference: masks, an empty row,
bf16, batch axes, GQA, one query, one key."""

from __future__ import annotations

import re

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.explain import render_text, report
from napkin.pipeline import run_plan

HEAD = """axis b, h, q, x, d
in Q[b h q d]: {dtype}
in K[b h x d]: {dtype}
"""
STATS = {"L": "logsumexp[x](S)", "M": "max[x](S)", "E": "sum[x](exp(S))"}
SCORES = {"plain": "Q * K / 4",
          "causal": "where(x <= q, Q * K / 4, -inf)",
          "strict": "where(x < q, Q * K * 0.25, -inf)",            # (row 0 sees no key)
          "window": "where(x <= q and q - x < 16, Q * K / sqrt(size(d)), -inf)"}


def _text(names="L", scores="plain", dtype="f16") -> str:
    lines = [HEAD.format(dtype=dtype) + f"S[b h q x] = {SCORES[scores]}"]
    lines += [f"{n}[b h q] = {STATS[n]}" for n in names]
    lines += [f"out {n}: f32" for n in names]
    return "\n".join(lines) + "\n"


def _alone(p):
    """The plan's one kernel, FlashAttention without P V."""
    (kp,) = p.kernels
    assert kp.schedule.engine == ATTENTION, kp.schedule.engine
    site = kp.schedule.site
    assert site.out is None and site.v is None and site.width == 0, site
    return kp


@pytest.mark.parametrize("names", ["L", "M", "E", pytest.param("MEL", marks=pytest.mark.thorough)])
def test_row_statistics_of_scores_alone_are_one_attention_kernel(names):
    """At q = x = 4096 (d = 16, dynamic, specialised) the statistics were a product kernel
    storing S and a CUDA-core reduction (51.1 us, h100 model); now one kernel on tensor cores
    reading them from its online softmax's state."""
    p = plan(napkin.load(_text(names)), "h100", {"b": 1, "h": 1, "q": 4096, "x": 4096, "d": 16})
    kp = _alone(p)
    kinds = {"L": "logsumexp", "M": "max", "E": "sumexp"}
    assert sorted(kp.schedule.site.lse_kinds) == sorted(kinds[n] for n in names)
    assert p.time < 10e-6, p.time
    text = render_text(report(p))
    assert "FlashAttention-2 without P V (row statistics of the scores alone" in text, text
    assert "no O, no second product" in text


def test_the_cuda_cores_plan_it_as_before():
    """--engine cuda-cores keeps the CUDA-core plan (the statistics a reduction of their own)."""
    p = plan(napkin.load(_text("L")), "h100", {"b": 1, "h": 1, "q": 64, "x": 64, "d": 16},
             engine="cuda-cores")
    assert all(kp.schedule.engine != ATTENTION for kp in p.kernels)


ATTENTION_TEXT = """axis b, h, q, x
axis d = 64
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = Q * K / 8
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
out O: f16
"""


def test_priced_as_attention_without_its_second_product():
    """At attention's own tiling the model charges half its tensor work (no P V), its MUFU
    exactly (the same exponentials per score and row), less FP32 (no O rescale)."""
    shape = {"b": 1, "h": 16, "q": 4096, "x": 4096}
    att = plan(napkin.load(ATTENTION_TEXT), "h100", shape)
    (ka,) = att.kernels
    c = ka.schedule.choice
    hints = {"stream": {"x": c.stream[1]}, "group": {"q": dict(c.group)["q"]}}
    alone = plan(napkin.load(ATTENTION_TEXT.split("in V")[0] +
                             "L[b h q] = logsumexp[x](Q * K / 8)\nout L: f32\n"),
                 "h100", shape, hints)
    kl = _alone(alone)
    assert kl.schedule.choice.warps == c.warps and kl.schedule.choice.thread == c.thread
    a, b = dict(ka.cost.compute_parts), dict(kl.cost.compute_parts)
    assert b["tensor"] == pytest.approx(a["tensor"] / 2)
    assert b["mufu"] == pytest.approx(a["mufu"])
    assert b["fp32"] < 0.9 * a["fp32"]
    assert kl.cost.time < ka.cost.time


def _emulated(text, shape, within_budget, seed=3):
    d = napkin.load(text)
    p = plan(d, "h100", shape)
    _alone(p)
    inputs = random_inputs(d, shape, seed)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)


def test_row_statistics_of_scores_alone_emulated_at_an_odd_size(within_budget):
    """Row 0 of `x < q` sees no key: -inf, -inf and 0 as the reference (special values
    compared exactly); x = 37 a partial last chunk, which rows past 37 see whole."""
    _emulated(_text("MEL", "strict"), {"b": 1, "h": 1, "q": 65, "x": 37, "d": 16},
              within_budget)


@pytest.mark.thorough       # (g++ builds each kernel: about 1.5 to 3 CPU-s)
@pytest.mark.parametrize("names, scores, dtype, shape", [
    ("M", "plain", "f16", {"b": 1, "h": 1, "q": 37, "x": 65, "d": 16}),
    ("E", "plain", "f16", {"b": 1, "h": 1, "q": 37, "x": 65, "d": 16}),
    ("MEL", "plain", "bf16", {"b": 2, "h": 3, "q": 37, "x": 65, "d": 16}),
    ("L", "causal", "f16", {"b": 1, "h": 1, "q": 37, "x": 65, "d": 16}),
    ("MEL", "strict", "bf16", {"b": 1, "h": 2, "q": 37, "x": 65, "d": 16}),
    ("L", "window", "f16", {"b": 1, "h": 1, "q": 37, "x": 65, "d": 16}),
    ("MEL", "plain", "f16", {"b": 1, "h": 1, "q": 1, "x": 65, "d": 16}),
    ("MEL", "plain", "f16", {"b": 1, "h": 1, "q": 37, "x": 1, "d": 16}),
    ("MEL", "strict", "f16", {"b": 1, "h": 1, "q": 1, "x": 1, "d": 16}),    # every row empty
    ("MEL", "causal", "f16", {"b": 1, "h": 1, "q": 64, "x": 128, "d": 40}),  # head padded
    ("E", "causal", "f16", {"b": 1, "h": 1, "q": 130, "x": 200, "d": 16}),   # chunks skipped
])
def test_row_statistics_of_scores_alone_emulated(names, scores, dtype, shape, within_budget):
    _emulated(_text(names, scores, dtype), shape, within_budget, seed=shape["q"])


GQA = """axis b, h, r, q, x, d
in Q[b h r q d]: f16
in K[b h x d]: f16
L[b h r q] = logsumexp[x](Q * K / 4)
out L: f32
"""


@pytest.mark.thorough
@pytest.mark.parametrize("shape", [{"b": 1, "h": 2, "r": 3, "q": 5, "x": 65, "d": 16},
                                   {"b": 1, "h": 1, "r": 4, "q": 1, "x": 33, "d": 64}])
def test_grouped_query_statistics_emulated(shape, within_budget):
    """K shared by the r query heads of a group (their rows packed where q is short)."""
    _emulated(GQA, shape, within_budget)


@pytest.mark.thorough
def test_an_empty_row_is_minus_infinity():
    """A row with no key (`x < q` at q = 0): logsumexp -inf, max -inf, sum of exp 0, as the
    reference's rule (an empty reduction's identity)."""
    shape = {"b": 1, "h": 1, "q": 5, "x": 7, "d": 16}
    d = napkin.load(_text("MEL", "strict"))
    p = plan(d, "h100", shape)
    _alone(p)
    inputs = random_inputs(d, shape, 5)
    out = run_plan(p, inputs, shape, timeout_s=600)
    ref = dict(zip((s.name for s in d.outputs),
                   napkin.run(d, *[inputs[s.name] for s in d.inputs], backend="reference")))
    assert out["L"][0, 0, 0] == -float("inf") and out["M"][0, 0, 0] == -float("inf")
    assert out["E"][0, 0, 0] == 0.0
    for name in "MEL":
        assert ref[name][0, 0, 0] == out[name][0, 0, 0], name


@pytest.mark.parametrize("stats", [["sum[x](S)"], ["logsumexp[x](S)", "max[x](S * 2)"]])
def test_statistics_that_are_not_the_state_stay_on_the_cuda_cores(stats):
    """A plain sum of the scores (the canonical IR's contraction over x and d), or a
    statistic of other values beside them (`S * 2`), is no online softmax's state: no kernel
    of the plan is the attention one."""
    lines = [HEAD.format(dtype="f16") + "S[b h q x] = Q * K / 4"]
    lines += [f"A{i}[b h q] = {s}" for i, s in enumerate(stats)]
    lines += [f"out A{i}: f32" for i in range(len(stats))]
    p = plan(napkin.load("\n".join(lines) + "\n"), "h100",
             {"b": 1, "h": 2, "q": 64, "x": 64, "d": 16})
    assert all(kp.schedule.engine != ATTENTION for kp in p.kernels)


@pytest.mark.parametrize("names", ["E", "L"])
def test_the_chunk_loop_runs_over_the_masks_band(names):
    """Causal statistics alone bound their chunk loop by the mask's band as attention does
    (codegen/masks.index_span, read from the scores' mask: a sum of exp's too), as the model
    counts it (half the pairs at q = x = 4096)."""
    p = plan(napkin.load(_text(names, "causal")), "h100",
             {"b": 1, "h": 1, "q": 4096, "x": 4096, "d": 16})
    kp = _alone(p)
    assert 0.45 < float(kp.cost.computed) < 0.55, kp.cost.computed
    assert re.search(r"for \(int c0 = cfirst; c0 < cfull; c0 \+= \d+\)", render(lower(p)))


def test_scores_of_mixed_dtypes_stay_on_the_cuda_cores_and_say_why():
    """Q in f32 and K in f16: mma.sync takes one 16-bit dtype (operand_reads.one_dtype, the
    check attention's FlashSite makes too): no attention kernel, and explain says why."""
    text = ("axis b, h, q, x\naxis d = 16\nin Q[b h q d]: f32\nin K[b h x d]: f16\n"
            "L[b h q] = logsumexp[x](Q * K / 4)\nout L: f32\n")
    p = plan(napkin.load(text), "h100", {"b": 1, "h": 1, "q": 4096, "x": 4096})
    assert all(kp.schedule.engine != ATTENTION for kp in p.kernels)
    said = render_text(report(p, compare=False))
    assert "on CUDA cores: Q, K are f16/f32; mma.sync takes one 16-bit dtype" in said, said
