"""A gather from a view of a load reads the load from global memory where used, as a gather
from the load itself does (model.kernel_model; codegen reads `p[position]`): fuzz seed 606's
`sum[m](I1[m])` with I1 declared [i] (so m is i renamed, i = m = 97) split by 6 gathers I1 at
each split's clamped window (p_m s_m). The model held the view `I1[m]` whole in every
thread's registers (97 x 8 bytes), so `--split m=6` was refused (N0603, 776 bytes of
registers). Emulated against float64 at i = 97 and odd sizes around it."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.pipeline import Options, plan as pipeline_plan, run_plan
from napkin.runtime import compare

TEXT = """axis i = {n}, m
in X0[{x}]: f32
in I1[i]: i64
in I0[i]: i32
E0[i] = X0 + sum[m](I1[m]) + X0
E1[i]: f32 = E0[I0[i]]
out E1: f32
"""


def _inputs(d, n: int, scalar: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"X0": rng.standard_normal(() if scalar else (n,)).astype(np.float32),
            "I1": rng.integers(-50, 50, n).astype(np.int64),
            "I0": rng.integers(0, n, n).astype(np.int32)}


def test_the_split_window_of_a_viewed_load_is_not_held_in_registers():
    d = napkin.load(TEXT.format(n=97, x="i"))
    p = pipeline_plan(d, Options.make(target="h100", split={"m": 6}))
    part = next(kp for kp in p.kernels if any(a.name.startswith("I1") for a in kp.model.arrays))
    names = {a.name: a for a in part.model.arrays}
    assert "I1" not in names and "I1[m]" not in names, names      # (the view: seen there)
    (gather,) = [a for a in part.model.arrays if a.name.startswith("I1[")]
    assert gather.unstaged and set(gather.axes) == {"p_m", "s_m"}
    regs = next(c for c in part.cost.levels if c.name == "registers")
    assert regs.M < 97 * 8


@pytest.mark.parametrize("n, parts, scalar", [(97, 6, False), (97, 6, True), (95, 5, False),
                                              (98, 6, True), (96, 7, False)])
def test_seed_606_split_plans_and_matches_float64(n, parts, scalar):
    d = napkin.load(TEXT.format(n=n, x="" if scalar else "i"))
    p = pipeline_plan(d, Options.make(target="h100", split={"m": parts}))
    assert p.split is not None
    inputs = _inputs(d, n, scalar, n)
    out = run_plan(p, inputs, dict(p.sizes))
    for name, v in compare.against_reference(d, inputs, out, plan=p).items():
        assert v.ok, (n, parts, name, v.message)
