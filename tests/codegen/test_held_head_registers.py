"""FlashAttention-2 with Q held and a head wider than 64 (d = 72, padded to 80: five 16-wide
slices of Q a lane) beside 64 scores a lane: ptxas spills (d = 72 at 128-key chunks: 255
registers, 232 bytes of spills; dk = 80 dv = 72: 272 bytes, with no padding), which the
register line did not see (238). occupancy.HELD_SLICE_REGISTERS charges each held slice
beyond 4 at more than 32 scores a lane (fitted to ptxas over a grid of dk and dv, value
fragments odd and even: benchmarks/flash_registers.py --padded), so the planner takes a
tiling ptxas compiles without spills, its estimate within 30 of ptxas's count (the chains'
tolerance, tests/compiler/test_fuse_recompute.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler import flash, occupancy
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.runtime import nvrtc

from .conftest import library
from .test_flash_wide_heads import own_widths

LONG = {"b": 4, "h": 16, "q": 4096, "x": 4096}
TOLERANCE = 30
THOROUGH = pytest.mark.thorough


def diagram(name: str):
    """`attention d=72`, `causal_attention d=72`, `attention dk=80 dv=72`."""
    base, *heads = name.split()
    if heads[0].startswith("dk"):
        dk, dv = (int(h.split("=")[1]) for h in heads)
        return own_widths(dk, dv, causal=base.startswith("causal"))
    return library(base, d=int(heads[0].split("=")[1]))


def test_held_slices_beyond_four_beside_64_scores_a_lane_are_charged():
    """d = 72 held at one fragment a warp: 44 registers a slice beyond 4 at 128-key chunks
    (the tiling of 120 fragment registers the line put at 238: now past 255), none at 64
    keys nor with Q re-read; d = 64's four slices nothing."""
    for head, chunk, reread, want in ((72, 128, False, 44.0), (104, 128, False, 132.0),
                                      (72, 64, False, 0.0), (72, 128, True, 0.0),
                                      (64, 128, False, 0.0)):
        p = plan(library("attention", d=head), "h100", LONG)
        (kp,) = p.kernels
        row = kp.schedule.site.row
        choice = replace(kp.choice, thread=tuple((a, 16 if a == row else t)
                                                 for a, t in kp.choice.thread),
                         stream=(kp.choice.stream[0], chunk), reread=reread)
        assert float(occupancy.held_head(kp.model, choice, p.sizes)) == want, (head, chunk)
        if head == 72 and chunk == 128 and not reread:
            assert float(occupancy.registers(kp.model, choice, p.sizes, 0.0)) > 255


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC wheels not installed")
@pytest.mark.parametrize("name", [
    "attention d=72", "attention dk=80 dv=72",
    pytest.param("attention dk=72 dv=64", marks=THOROUGH),
    pytest.param("causal_attention d=72", marks=THOROUGH),
    pytest.param("attention dk=88 dv=56", marks=THOROUGH),
    pytest.param("attention dk=104 dv=40", marks=THOROUGH)])
def test_the_chosen_plan_of_a_held_wide_head_compiles_without_spills(name):
    p = plan(diagram(name), "h100", LONG)
    (kp,) = p.kernels
    assert kp.schedule.engine == ATTENTION and not kp.schedule.reread
    site = kp.schedule.site
    fm = dict(kp.choice.thread)[site.row] // flash.FRAG_ROWS
    assert fm * kp.choice.stream[1] <= 64, kp.choice      # (not 64 scores a lane)
    r = nvrtc.compile(render(lower(p)), arch="sm_90").resources[f"napkin_{kp.kernel.name}"]
    assert r.spill_stores == 0 and r.spill_loads == 0, (name, r)
    assert abs(float(kp.cost.registers) - r.registers) <= TOLERANCE, (name, r, kp.cost.registers)
