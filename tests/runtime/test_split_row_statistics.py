"""Split decoding with row statistics of the scores beside attention (compiler/
split_merges.Merges._state_merges): each statistic's partial is the partial kernel's final
state (row_state.py), and its merge now joins the one that merges O: L = logsumexp[x](S),
M = max[x](S), E = sum[x](exp(S)) beside O at b=1 h=16 q=1 x=8192 d=16 --split x=4 merged
in 4 kernels (O's merge, then one each for L and M: 19.1 us, h100 model), now 2 (the partial
kernel, one merge of O, L and M: 15.0 us; attention alone 12.6 us). L merges from O.lse, the
pair's own partial (L.part had stored the same values again: 15.36 -> 15.03 us with M and E,
14.69 -> 14.36 us with L alone, h100 model). Plans asserted; the
emulated CUDA at odd sizes against the float64 reference, a causal mask and a row with no
key."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.pipeline import run_plan

from .test_flash_row_state import _text

DECODE = {"b": 1, "h": 16, "q": 1, "x": 8192}


def _merges(p):
    """The plan's kernels but the partial one (FlashAttention), each a set of its stores."""
    partial = [kp for kp in p.kernels if kp.schedule.engine == ATTENTION]
    assert len(partial) == 1, [kp.schedule.engine for kp in p.kernels]
    return [kp for kp in p.kernels if kp is not partial[0]]


def _partial_stores(p) -> set[str]:
    (partial,) = [kp for kp in p.kernels if kp not in _merges(p)]
    return {ir.op(p.graph, n).name for n in partial.kernel.stores}


@pytest.mark.parametrize("names", ["L", "MEL"])
def test_the_statistics_merge_with_o(names):
    p = plan(napkin.load(_text(names, d=16)), "h100", DECODE, {"split": {"x": 4}})
    (merge,) = _merges(p)
    assert len(merge.kernel.stores) == 1 + len(names), merge.kernel.stores
    # L's partial is O.lse, stored once (L.part beside it held the same values)
    assert _partial_stores(p) == {"O.part", "O.lse"} | {f"{n}.part" for n in names if n != "L"}
    assert p.kernels[0].model.streaming.passes == 1 and merge.model.streaming.passes == 1
    alone = plan(napkin.load("attention", d=16), "h100", DECODE, {"split": {"x": 4}})
    assert p.time <= 1.25 * alone.time, (p.time, alone.time)


@pytest.mark.parametrize("names,scores,dtype,sizes,merge", [
    ("MEL", "plain", "f16", dict(b=2, h=3, q=1, x=301), "kernel"),
    pytest.param("MEL", "strict", "bf16", dict(b=1, h=2, q=5, x=129), "kernel",
                 marks=pytest.mark.thorough),
    ("LM", "causal", "f16", dict(b=1, h=2, q=37, x=65), "last-block")])
def test_split_statistics_emulated_at_odd_sizes(names, scores, dtype, sizes, merge,
                                                 within_budget):
    """`strict`: row 0 sees no key (-inf, -inf and 0 from the merge)."""
    d = napkin.load(_text(names, scores).replace("f16", dtype).replace("out O: " + dtype,
                                                                         "out O: f32"))
    p = plan(d, "h100", sizes, {"split": {"x": 4}}, merge=merge)
    assert len(_merges(p)) == 1 and "L.part" not in _partial_stores(p)
    inputs = random_inputs(d, sizes, 5)
    within_budget(d, inputs, run_plan(p, inputs, sizes, timeout_s=600), p)
