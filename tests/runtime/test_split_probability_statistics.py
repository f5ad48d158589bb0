"""Split decoding with a row sum or maximum of P beside attention (split_merges._probabilities):
`Z = sum[x](P)` refused to split (N0607: softmax[x] reached a reduction other than P V);
now each split stores its own P_p's sum and max from the partial kernel's final state and
O's merge kernel weighs them by softmax[p_x](L_p) as it weighs O_p. The logsumexp of the
same scores merges from O.lse (the pair's own partial), no longer stored again as L.part. At
b=1 h=16 q=1 x=8192 d=16 --split x=4 (h100 model): Z, W and L beside O 2 kernels, 15.1 us
(attention with L alone 14.7 us before, 14.4 us now). Plans asserted; the emulated CUDA at
odd sizes against the float64 reference: a first row with no key (Z, W 0, NaN where the
softmax is written out; L -inf), splits with no key, f16, bf16 and f32 (the CUDA cores).

The merge kernel streamed p_x in 2 passes: O's and Z's products and W's maximum read one
softmax[p_x](L_p), so it paired with neither (statistics first, then the weights). Now Z's
product weighs by a softmax of its own (a second pair) and W merges the splits' maxima of
their scores, exp(max[p_x](m_p) - logsumexp[p_x](L_p)): one pass. At DECODE --split x=4
(h100 model) the merge kernel 2.57 -> 2.26 us, the plan 13.03 -> 12.73 us."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.pipeline import run_plan

from .test_probability_statistics import BUILT_IN, WRITTEN, _text

DECODE = {"b": 1, "h": 16, "q": 1, "x": 8192}


def _stores(p) -> list[set[str]]:
    """Each kernel's stored arrays by name, the partial kernel's first."""
    return [{ir.op(p.graph, n).name for n in kp.kernel.stores} for kp in p.kernels]


def test_probability_statistics_merge_with_o():
    p = plan(napkin.load(_text()), "h100", DECODE, {"split": {"x": 4}})
    assert [kp.schedule.engine == ATTENTION for kp in p.kernels] == [True, False]
    assert _stores(p) == [{"O.part", "O.lse", "Z.part", "W.part"}, {"O", "Z", "W", "L"}]
    assert [kp.model.streaming.passes for kp in p.kernels] == [1, 1]
    alone = plan(napkin.load("attention", d=16), "h100", DECODE, {"split": {"x": 4}})
    assert p.time <= 1.25 * alone.time, (p.time, alone.time)


@pytest.mark.parametrize("scores,dtype,softmax,sizes,merge", [
    ("strict", "bf16", BUILT_IN, dict(b=1, h=2, q=37, x=65), "kernel"),
    pytest.param("plain", "f16", BUILT_IN, dict(b=2, h=3, q=1, x=301), "kernel",
                 marks=pytest.mark.thorough),
    pytest.param("strict", "f16", WRITTEN, dict(b=1, h=2, q=37, x=65), "last-block",
                 marks=pytest.mark.thorough),
    pytest.param("strict", "f32", BUILT_IN, dict(b=1, h=2, q=37, x=65), "kernel",
                 marks=pytest.mark.thorough)])
def test_split_probability_statistics_emulated_at_odd_sizes(scores, dtype, softmax, sizes,
                                                            merge, within_budget):
    d = napkin.load(_text(scores, dtype, softmax))
    p = plan(d, "h100", sizes, {"split": {"x": 4}}, merge=merge)
    assert len(p.kernels) == 2 and "L.part" not in _stores(p)[0]
    assert {"Z.part", "W.part", "O.lse"} <= _stores(p)[0]
    inputs = random_inputs(d, sizes, 5)
    within_budget(d, inputs, run_plan(p, inputs, sizes, timeout_s=600), p)
