"""Heads that are no multiple of 16 on the tensor cores: padded with zeros in shared memory
(compiler/headpad.py). Stable Diffusion's d = 40 (and 24, 72, 200) planned FlashAttention
at scale (before: S and P through global memory, three kernels), the model charging the
padded tensor work and the real bytes; the chosen plans run on the emulator against the
float64 reference at odd sizes (f16 and bf16, causal and not, the gradient's chains); a
seeded copy of garbage, a dropped zero fill and a store of the padding columns fail."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import chain, headpad
from napkin.compiler.cost import evaluate
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION, CHAIN
from napkin.explain import render_text, report
from napkin.pipeline import run_plan
from napkin.runtime import compare

from ..sampling import sampled
from .conftest import library
from .test_chain import assert_gradient_matches, attention_inputs

LONG = {"b": 4, "h": 16, "q": 4096, "x": 4096}
ODD = {"b": 1, "h": 2, "q": 37, "x": 45}
_PLANS: dict = {}


def long_plan(name: str, head: int, dtype: str = "f16"):
    if (name, head, dtype) not in _PLANS:
        _PLANS[name, head, dtype] = plan(library(name, dtype, d=head), "h100", LONG)
    return _PLANS[name, head, dtype]


@pytest.mark.parametrize("head", [24, 40, 72, 200])
def test_a_padded_head_plans_flash_attention_at_scale(head):
    p = long_plan("attention", head)
    (kp,) = p.kernels
    site = kp.schedule.site
    dk, dv = headpad.head_tile(site), headpad.width_tile(site)
    assert kp.schedule.engine == ATTENTION
    assert dk == headpad.up(head, 16) > head and dv == headpad.up(head, 8)
    tiles = {n: lay.inner for n, lay in kp.schedule.layouts}     # Q and K [..][48], V [..][40]
    assert (tiles[site.q], tiles[site.k], tiles[site.v]) == (dk, dk, dv)
    text = render_text(report(p))
    more = (dk - head) / (2 * head) + (dv - head) / (2 * head)
    assert f"d = {head} padded to {dk} in shared memory" in text, text
    assert f"{more:.0%} more tensor work" in text


def test_the_model_charges_padded_tensor_work_and_real_bytes():
    """d = 40: Q K over 48 of the head, P V over 40; the bytes from HBM are the real head's,
    shared memory holds tiles of 48 (and more than without the padding)."""
    p = long_plan("attention", 40)
    (kp,) = p.kernels
    bare = evaluate(replace(kp.model, padded=()), kp.columns, kp.choice, p.sizes, p.target)
    cost = kp.cost
    assert dict(cost.compute_parts)["tensor"] == pytest.approx(
        dict(bare.compute_parts)["tensor"] * (48 + 40) / (40 + 40))
    assert cost.levels[1].H == bare.levels[1].H and cost.levels[1].M > bare.levels[1].M
    # the same tensor work as d = 48's Q K and d = 40's P V would be at this tiling
    assert cost.levels[1].M - bare.levels[1].M >= (48 - 40) * 2 * (
        dict(kp.choice.group)["q"] + kp.choice.stream[1] * kp.cost.stages)


EMULATED = sampled([
    ("attention", 40, "f16"), ("causal_attention", 24, "bf16"), ("attention", 72, "bf16"),
    ("causal_attention", 40, "f16"), ("attention", 24, "f16"), ("causal_attention", 72, "f16"),
    ("attention", 40, "bf16"), ("attention", 36, "f16")])   # (36: rows of 72 bytes, copied a
                                                            # value at a time; dv padded to 40)


@pytest.mark.parametrize("name, head, dtype", EMULATED)
def test_the_padded_plan_matches_the_reference_on_the_emulator(name, head, dtype):
    p = long_plan(name, head, dtype)
    assert [kp.schedule.engine for kp in p.kernels] == [ATTENTION]
    inputs = random_inputs(p.diagram, ODD, head + len(name))
    out = run_plan(p, inputs, ODD, timeout_s=240)
    for v in compare.against_reference(p.diagram, inputs, out).values():
        assert v.ok, v.message


@pytest.mark.parametrize("wrt", ["Q,K,V", pytest.param("Q", marks=pytest.mark.thorough)])
def test_the_gradient_of_a_padded_head_is_chains_that_match(wrt):
    d = napkin.grad("attention", wrt=tuple(wrt.split(",")), saved=True, d=40)
    p = plan(d, "h100", {"b": 2, "h": 4, "q": 2048, "x": 2048})
    chains = [kp for kp in p.kernels if kp.schedule.engine == CHAIN]
    assert chains and all(isinstance(kp.schedule.site, chain.ChainSite) and
                          kp.schedule.site.padded for kp in chains)
    shape = {"b": 1, "h": 1, "q": 45, "x": 37}
    inputs, want = attention_inputs(shape, 40, False, seed=7)
    assert_gradient_matches(d, p, shape, inputs, want)


def _seeded(edit, head: int = 40) -> bool:
    """Whether the plan of d = head, its CUDA edited, matches the reference (False where
    the emulator reports an error: a read or write out of range)."""
    p = long_plan("attention", head)
    inputs = random_inputs(p.diagram, ODD, 3)
    try:
        out = run_plan(p, inputs, ODD, timeout_s=240, edit=edit)
    except napkin.NapkinError:
        return False
    return all(v.ok for v in compare.against_reference(p.diagram, inputs, out).values())


FILL = "(org_2 + eo < n2 && ei < 40) ? 16 : 0"     # Q's copy: zeros past the head


def test_seeded_garbage_in_the_padding_gives_wrong_values():
    """Q's and K's copies read past the head (the next row's values) instead of writing
    zeros (garbage in one of them alone meets the other's zeros: only inf or NaN shows)."""
    def edit(src: str) -> str:
        assert FILL in src and src.count("&& ei < 40) ? 16 : 0") > 2
        return src.replace("&& ei < 40) ? 16 : 0", ") ? 16 : 0")
    assert _seeded(None) and not _seeded(edit)


def test_seeded_missing_zero_fill_gives_wrong_values():
    """Q's padding columns never written (the emulator's shared memory starts as NaN)."""
    def edit(src: str) -> str:
        at = src.index(FILL)
        call = src.rindex("napkin_cp_async_16(", 0, at)
        return src[:call] + "if (ei < 40) " + src[call:]
    assert not _seeded(edit)


def test_seeded_store_of_the_padding_columns_is_caught():
    """d = 36: O's fragments cover 40 columns (V's tile padded to 40); stores of columns 36
    to 39 (zeros) unguarded and unclamped land in the next row or past the array."""
    def edit(src: str) -> str:
        test, clamp = "(pt5 < 36)", "(pt5 < (int)(36 - 1) ? pt5 : (int)(36 - 1))"
        assert src.count(test) == 1 and src.count(clamp) == 1
        return src.replace(test, "(pt5 < 40)").replace(clamp, "pt5")
    assert _seeded(None, 36) and not _seeded(edit, 36)


def test_an_mlp_chain_pads_its_contracted_rows_and_kept_columns():
    """The MLP at m = o = 130 (record_plans' small shape): one chain, X's rows and W1's
    columns of m padded to 144 (W1's tile is [m][f]: its padded axis the rows), W2's o to
    136; against the float64 reference."""
    d = library("mlp", "f16")
    shape = {"t": 77, "m": 130, "f": 77, "o": 130}
    p = plan(d, "h100", shape)
    (kp,) = p.kernels
    assert kp.schedule.engine == CHAIN and p.specialised == {"m": 130, "o": 130}
    tiles = {(lay.outer, lay.inner) for _, lay in kp.schedule.layouts}
    assert {(16, 144), (144, 16), (16, 136)} <= tiles, tiles
    inputs = random_inputs(p.diagram, shape, 5)
    out = run_plan(p, inputs, shape, timeout_s=240)
    for v in compare.against_reference(p.diagram, inputs, out).values():
        assert v.ok, v.message


def test_a_padded_flash_logsumexp_of_a_row_with_an_infinite_score_is_infinite():
    """tests/fuzz/edges.py's attention with its logsumexp stored, d = 8 (padded to 16: on
    FlashAttention now): the row whose query holds +inf has a +inf maximum, its sum NaN
    (inf - inf in each exponent); its logsumexp is +inf, as the CUDA cores' (was NaN)."""
    from ..fuzz import edges
    d = napkin.load(edges.ATTENTION.replace("DT", "f16"))
    shape = {"b": 1, "q": 6, "x": 23}
    p = plan(d, "h100", shape)
    assert [kp.schedule.engine for kp in p.kernels] == [ATTENTION]
    inputs = edges.attention_inputs(6, 23, "f16")
    out = run_plan(p, inputs, {**shape, "d": 8}, timeout_s=240)
    ref, _, _ = compare.references(d, inputs, bounded=False)
    assert ref["L"][0, 3] == np.inf and out["L"][0, 3] == np.inf
    np.testing.assert_allclose(out["L"], ref["L"], rtol=1e-3)
