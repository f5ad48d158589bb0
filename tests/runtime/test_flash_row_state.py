"""A row maximum or a row sum of exponentials of the scores beside attention is FlashAttention's
own state, as its logsumexp (compiler/row_state.py): `M = max[x](S)` as an extra output kept
the library's attention off one kernel (S stored, a max kernel reading it: 232 us at b=1 h=16
q=x=2048 d=64, h100 model, against 43.6 us without M); now the attention kernel stores m (scaled
as written), l exp(m) and m + log l after its last chunk. Plans asserted; the emulated CUDA
at odd sizes, causal and not, a first row with no key, against the float64 reference."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import flash
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.explain import render_text, report
from napkin.pipeline import run_plan

# attention's inputs at d = 16 in one dtype, the head the row-statistics tests share
HEAD16 = """axis b, h, q, x
axis d = 16
in Q[b h q d]: {dtype}
in K[b h x d]: {dtype}
in V[b h x d]: {dtype}
"""
TEXT = """axis b, h, q, x
axis d = {d}
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = {scores}
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
{stats}
out O: f16
out {outs}
"""
STATS = {"M": "max[x](S)", "E": "sum[x](exp(S))", "L": "logsumexp[x](S)"}
SCORES = {"plain": "Q * K / sqrt(size(d))",
          "causal": "where(x <= q, Q * K / sqrt(size(d)), -inf)",
          "strict": "where(x < q, Q * K * 0.25, -inf)"}     # (row 0 sees no key)


def _text(names="MEL", scores="plain", d=16) -> str:
    stats = "\n".join(f"{n}[b h q] = {STATS[n]}" for n in names)
    return TEXT.format(d=d, scores=SCORES[scores], stats=stats,
                       outs=", ".join(f"{n}: f32" for n in names))


def _site(p) -> flash.FlashSite:
    (kp,) = p.kernels
    assert kp.schedule.engine == ATTENTION
    site = flash.examine(p.graph, kp.kernel, kp.model, p.target, p.sizes)
    assert isinstance(site, flash.FlashSite), site
    return site


@pytest.mark.parametrize("names", ["M", "E", "MEL"])
def test_row_statistics_beside_attention_are_its_state(names):
    """One FlashAttention kernel stores them, priced as attention alone but for their stores."""
    shape = {"b": 1, "h": 16, "q": 2048, "x": 2048}
    p = plan(napkin.load(_text(names, d=64)), "h100", shape)
    site = _site(p)
    kinds = {"M": "max", "E": "sumexp", "L": "logsumexp"}
    assert sorted(site.lse_kinds) == sorted(kinds[n] for n in names), site.lse_kinds
    alone = plan(napkin.load("attention"), "h100", shape)
    assert p.kernels[0].schedule.choice == alone.kernels[0].schedule.choice
    assert alone.time <= p.time <= 1.02 * alone.time, (p.time, alone.time)
    text = render_text(report(p))
    assert "from the softmax's final state (maximum m, sum l), no reduction of their own" in text


def test_explain_says_the_statistics_are_read_from_the_state():
    """The "streams x through" line names them as the state's values, not running accumulators;
    on the CUDA cores (f32: no FlashAttention) they stay reductions of their own."""
    shape = {"b": 1, "h": 2, "q": 64, "x": 64}
    line = _streams_line(plan(napkin.load(_text("MEL")), "h100", shape))
    assert "M = m read from the final state" in line, line
    assert "E = l exp(m) read from the final state" in line, line
    assert "L = m + log l read from the final state" in line, line
    assert "running max and sum of exp" not in line and "running max;" not in line, line
    f32 = _text("L").replace("f16", "f32")
    line = _streams_line(plan(napkin.load(f32), "h100", shape))
    assert "running max and sum of exp" in line and "final state" not in line, line


def _streams_line(p) -> str:
    return next(t for t in render_text(report(p)).splitlines() if "streams x" in t)


def test_a_maximum_of_other_values_is_a_reduction_of_its_own():
    """The unscaled product's maximum is not the state's (the softmax's argument is scaled)."""
    text = _text("M").replace("M[b h q] = max[x](S)", "M[b h q] = max[x](Q * K)")
    p = plan(napkin.load(text), "h100", {"b": 1, "h": 2, "q": 37, "x": 37})
    for kp in p.kernels:
        site = flash.examine(p.graph, kp.kernel, kp.model, p.target, p.sizes)
        assert not (isinstance(site, flash.FlashSite) and site.lse)


def _emulated(d, p, shape, within_budget, seed=3):
    inputs = random_inputs(d, shape, seed)
    within_budget(d, inputs, run_plan(p, inputs, shape, timeout_s=600), p)


@pytest.mark.parametrize("scores", ["plain", "strict"])
def test_row_statistics_emulated_at_an_odd_size(scores, within_budget):
    d = napkin.load(_text("MEL", scores))
    shape = {"b": 1, "h": 2, "q": 37, "x": 37}
    p = plan(d, "h100", shape, {"stream": {"x": 16}})
    assert len(_site(p).lse) == 3
    _emulated(d, p, shape, within_budget)


@pytest.mark.thorough       # (g++ builds each kernel: about 2.5 CPU-s)
@pytest.mark.parametrize("n", [37, 65, 129])
@pytest.mark.parametrize("scores", list(SCORES))
@pytest.mark.parametrize("names", ["M", "E", "MEL"])
def test_row_statistics_emulated_at_odd_sizes(names, scores, n, within_budget):
    d = napkin.load(_text(names, scores))
    shape = {"b": 1, "h": 2, "q": n, "x": n}
    p = plan(d, "h100", shape, {"stream": {"x": 16}, "group": {"q": 16}})
    assert len(_site(p).lse) == len(names)
    _emulated(d, p, shape, within_budget, seed=n)


def test_a_statistic_of_scores_alone_is_flashattention_without_p_v():
    """`logsumexp[x](Q * K / 4)` with no P V is the attention kernel without its second product
    (compiler/flash_alone.py; tests/runtime/test_flash_scores_alone.py), not a CUDA-core one."""
    text = "\n".join(line for line in _text("L", d=16).splitlines()
                     if not line.startswith(("in V", "P[", "O[", "out O")))
    p = plan(napkin.load(text), "h100", {"b": 1, "h": 2, "q": 64, "x": 64})
    (kp,) = p.kernels
    assert kp.schedule.engine == ATTENTION and kp.schedule.site.out is None
    assert "FlashAttention-2 without P V" in render_text(report(p))
