"""Q held in registers or re-read from shared memory every chunk (Choice.reread): a candidate
of the FlashAttention-2 search with its cost (the LDSM per chunk in issue.py, the register
estimate in occupancy.py, the shared-to-register traffic in cost.py), a field of the
Schedule, shown by explain."""

from __future__ import annotations

import dataclasses

import pytest

import napkin
from napkin.compiler import flash
from napkin.compiler.pick import fits
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.compiler.schedule import ATTENTION
from napkin.diagrams.diagnostics import NapkinError
from napkin.explain import render_text, report

LONG = {"b": 4, "h": 16, "q": 4096, "x": 4096}
# a head of 512 for the scores, 64 for the values: Q's fragments alone (16 rows x 512, 128
# registers a lane) fill the budget
WIDE = ("axis b, h, q, x\naxis d = 512\naxis e = 64\nin Q[b h q d]: f16\nin K[b h x d]: f16\n"
        "in V[b h x e]: f16\nS[b h q x] = Q * K / sqrt(size(d))\nP[b h q x] = softmax[x](S)\n"
        "O[b h q e] = P * V\nout O: f16")


def fm_of(kp) -> int:
    return dict(kp.choice.thread)[kp.schedule.site.row] // 16


@pytest.mark.parametrize("target, arch", [("h100", "sm_90"), ("a100", "sm_80")])
def test_a_head_too_wide_for_q_in_registers_is_flashattention_with_q_re_read(target, arch):
    """Held, no tiling fits the fragment budget (before the choice existed the planner split
    the diagram into three kernels, S and P through global memory); re-read, one kernel, and
    ptxas confirms it without spills."""
    d = napkin.load(WIDE)
    p = plan(d, target, LONG)
    (kp,) = p.kernels
    s = kp.schedule
    assert s.engine == ATTENTION and s.reread and kp.choice.reread
    site = s.site
    held = flash.row_tilings(p.sizes, site.row, site.red, site.batch, {},
                             lambda fm, c, r: flash.registers(fm, c, site, r) <= flash.MAX_REGISTERS)
    assert held is None
    assert flash.registers(fm_of(kp), s.stream[1], site, True) <= flash.MAX_REGISTERS
    text = render_text(report(p))
    assert "Q re-read from shared memory every chunk" in text
    assert report(p)["kernels"][0]["engine"]["q_fragments"] == "shared memory"
    from napkin.pipeline import lowered
    from napkin.runtime import nvrtc
    prog, source = lowered(p)
    (res,) = nvrtc.compile(source, arch=arch).resources.values()
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= 255, res


def both(p):
    """(held, re-read) costs of the planned tiling."""
    (kp,) = p.kernels
    return [with_choices(p, [dataclasses.replace(kp.choice, reread=r)]).kernels[0]
            for r in (False, True)]


@pytest.mark.parametrize("name, head, target", [
    ("attention", 64, "a100"), ("attention", 64, "h100"), ("causal_attention", 128, "a100"),
    ("attention", 128, "h100")])
def test_re_reading_q_costs_an_ldsm_a_chunk_and_frees_registers(name, head, target):
    """For one tiling: re-read issues more (a ldmatrix.x4 per 16 rows and 16 of the head, per
    warp and chunk), moves more from shared memory to registers (Q every chunk), and needs
    fewer registers (Q's slices, not its head); the search keeps the faster of the two that
    fit (causal d=128 on the a100: held, its 128 x 64 tiles need more registers than a
    thread has)."""
    p = plan(napkin.load(name, d=head), target, LONG)
    held, again = both(p)
    assert dict(again.cost.compute_parts)["issue"] > dict(held.cost.compute_parts)["issue"]
    assert again.cost.levels[-1].H > held.cost.levels[-1].H
    assert again.cost.registers < held.cost.registers
    picked = p.kernels[0]
    fitting = [k for k in (held, again) if fits(k.cost)]
    assert picked.cost.time == min(k.cost.time for k in fitting)
    assert picked.schedule.reread == (again.cost.time == picked.cost.time)
    # the issue slots it adds: 1 per LDSM, rows / 16 x head / 16 of them per block and chunk
    blocks = picked.cost.levels[1].units
    rows = dict(picked.choice.group)["q"]
    chunks = -(-p.sizes["x"] // picked.choice.stream[1]) * picked.cost.computed
    added = blocks * chunks * rows / 16 * head / 16 * flash_reread_slots()
    issue = (dict(again.cost.compute_parts)["issue"] - dict(held.cost.compute_parts)["issue"])
    assert abs(issue * rate(p) / added - 1) < 1e-6


def flash_reread_slots() -> float:
    from napkin.compiler import issue
    return issue.FLASH_REREAD


def rate(p) -> float:
    """Warp instructions issued per second (the target's schedulers)."""
    return p.target.per_second("schedulers")


def test_re_reading_q_needs_a_margin_over_holding_it():
    """The search takes Q re-read only where the model predicts it REREAD_MARGIN faster than
    the best tiling that holds Q (flash.REREAD_MARGIN: the re-read form is uncalibrated):
    attention d=64 on the a100, whose best re-read tiling the model puts within the margin,
    holds Q as FlashAttention-2 does; the wide head, which cannot hold it, re-reads."""
    from napkin.compiler import tiling_rank
    d = napkin.load("attention", d=64)
    for target in ("a100", "h100"):
        p = plan(d, target, LONG)
        (kp,) = p.kernels
        assert not kp.schedule.reread
        ranked = tiling_rank.ranked(kp.model, kp.columns, p.target, p.sizes, kp.schedule.site, 64)
        again = [cost.time for c, cost in ranked if c.reread]
        assert again and min(again) > (1 - flash.REREAD_MARGIN) * kp.cost.time
    assert "Q's fragments held in registers" in render_text(report(plan(d, "h100", LONG)))
    (wide,) = plan(napkin.load(WIDE), "h100", LONG).kernels
    assert wide.schedule.reread


def test_only_attention_re_reads_q():
    d = napkin.load("matmul")
    p = plan(d, "h100", {"m": 4096, "n": 4096, "k": 4096})
    (kp,) = p.kernels
    with pytest.raises(NapkinError, match="re-reads Q from shared memory"):
        with_choices(p, [dataclasses.replace(kp.choice, reread=True)])


def test_the_ranked_candidates_keep_the_q_choice():
    """tiling_rank.ranked (what benchmarks/gpu_check.py times) returns each candidate as the
    search costed it, Q held or re-read: the first is the plan's choice."""
    from napkin.compiler import tiling_rank
    p = plan(napkin.load("attention", d=64), "a100", LONG)
    (kp,) = p.kernels
    ranked = tiling_rank.ranked(kp.model, kp.columns, p.target, p.sizes, kp.schedule.site, 16)
    assert {c.reread for c, _ in ranked} == {False, True}
    # the plan's choice: the fastest that holds Q (re-read is within the margin here)
    assert next(c for c, _ in ranked if not c.reread) == kp.choice
    for c, cost in ranked:
        assert with_choices(p, [c]).kernels[0].cost.time == pytest.approx(cost.time, rel=1e-9)
