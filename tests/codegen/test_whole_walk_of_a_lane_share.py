"""A value a CUDA-core thread holds in registers over the lanes' split axis is the lane's
share of it (accum.extent_of): a walk of that whole axis nested in a loop the lanes already
share (scalar._walk at step 1) cannot index it. Below, one CUDA-core kernel computes Q (a
streamed contraction over m, held split over d by the lanes), the scores, O and D; O's loop
over d walks the lanes, and the scores it computes inside summed Q over the whole of d from
`st0[j]` (one register per lane: read past its end; D NaN or wrong). Found in self-attention's
gradient planned at t=s=37 m=24 h=2 (dX, dWq, dWk NaN in the emulator). Now that walk reads Q
otherwise (its value computed again from its operands). Emulated against float64."""

from __future__ import annotations

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
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


def test_scores_summed_over_a_lane_split_head_inside_its_lanes_loop_match_float64():
    d = napkin.load(TEXT)
    # (m = 16: at m = 24 the planner now takes two kernels, since the small-shape counts of
    # 2026-12-07)
    sizes = {"t": 37, "s": 37, "m": 16, "h": 2}
    p = plan(d, "h100", sizes)
    eqs = p.graph.graph["equations"]
    (kp,) = p.kernels       # (the case: one kernel, Q held over d split by lanes)
    assert kp.schedule.split and kp.schedule.split[0] == "d", kp.schedule.split
    assert {e.name for e in eqs if e.stmt in kp.kernel.equations} >= {"Q", "S", "O", "D"}
    inputs = random_inputs(d, sizes, 3)
    out = run_plan(p, inputs, {**sizes, "d": 16})
    for name, v in compare.against_reference(d, inputs, out, plan=p).items():
        assert v.ok, (name, v.message)
