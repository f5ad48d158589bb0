"""FlashAttention-2's output rescale skipped when no row of a warp changed its running maximum
(codegen/flash.FlashLowering._softmax), run by the CPU emulator.

The data steers where each row's maximum lies. Q's first two coordinates select, per query
row, one of two key patterns carried by K's first two coordinates: a spike at key 0 (the row's
maximum is in the first chunk and never changes after it) or a ramp rising with the key (a
new maximum in every chunk); the other coordinates are random, so every key still weighs in.
`mixed` interleaves the two by blocks of 8 rows, so that a warp's rows g and g + 8 (and the
lanes of one warp) disagree. Outputs are checked against the float64 reference under the
tolerance rule, at odd sizes next to multiples of the chunk, causal and not, with NaN under
the mask and fully masked rows; the skip is shown bit-identical to always rescaling, the
data shown to take both sides of the branch, and seeded bugs in the skip's test caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.pipeline import run_plan
from napkin.runtime import compare

from .conftest import library
from .test_tensor_cores import flash_plan, with_static

VOTE = "if (__any_sync(0xffffffffu, rch))"


def steered(d, shape, kind: str, seed: int) -> dict:
    """Random Q, K, V whose rows' maxima follow `kind`: first (a spike at key 0), rising (a
    ramp over the keys: a new maximum each chunk) or mixed (the two by blocks of 8 rows)."""
    inputs = random_inputs(d, shape, seed)
    q, k = (inputs[n].astype(np.float64) for n in ("Q", "K"))
    root = math.sqrt(q.shape[-1])
    q[..., 2:] *= 0.7              # the random part of a score: about N(0, 0.5)
    k[..., 2:] *= 0.7
    rows = np.arange(q.shape[-2])
    spike = {"first": rows >= 0, "rising": rows < 0, "mixed": (rows // 8) % 2 == 0}[kind]
    q[..., 0], q[..., 1] = spike, ~spike
    keys = np.arange(k.shape[-2])
    k[..., 0] = np.where(keys == 0, 6.0 * root, 0.0)       # the score's spike: 6 at key 0
    k[..., 1] = 0.04 * root * keys                          # the ramp: 0.04 a key
    inputs["Q"], inputs["K"] = q.astype(inputs["Q"].dtype), k.astype(inputs["K"].dtype)
    return inputs


def chunk_of(p) -> int:
    return p.kernels[0].schedule.stream[1]


def check(d, p, inputs, shape, edit=None) -> dict:
    out = run_plan(p, inputs, shape, timeout_s=240, edit=edit)
    verdicts = compare.against_reference(d, inputs, out, plan=p)
    return out, all(v.ok for v in verdicts.values()), verdicts


@pytest.mark.parametrize("name, kind, q, chunks, extra", [
    ("attention", "first", 37, 3, 1),          # one key past three whole chunks
    ("attention", "rising", 37, 3, 0),         # whole chunks only
    ("attention", "mixed", 70, 2, -1),         # one key short of two
    ("causal_attention", "rising", 300, 2, 1),
    ("causal_attention", "mixed", 129, 1, 1),
])
def test_the_skipped_rescale_matches_the_reference(name, kind, q, chunks, extra):
    d = library(name, "f16")
    p = flash_plan(d)
    x = chunks * chunk_of(p) + extra
    shape = with_static(d, {"b": 1, "h": 2, "q": q, "x": x})
    _, ok, verdicts = check(d, p, steered(d, shape, kind, q + x), shape)
    assert ok, {n: v.message for n, v in verdicts.items()}


def test_nan_under_the_mask_and_fully_masked_rows_with_the_skip():
    """NaN in the keys a row's mask hides stays hidden; a row that sees one is NaN (as the
    reference); rows with no key give 0. Their factors are 0 or NaN, never 1: their warps
    rescale, the others may skip."""
    text = ("axis b, h, q, x\naxis d = 64\nin Q[b h q d]: f16, K[b h x d]: f16, V[b h x d]: f16\n"
            "S[b h q x] = where(q >= 5 and x <= q, Q * K / sqrt(size(d)), -inf)\n"
            "P[b h q x] = softmax[x](S)\nO[b h q d] = P * V\nout O: f16")
    d = napkin.load(text)
    p = flash_plan(d)
    shape = with_static(d, {"b": 1, "h": 2, "q": 150, "x": 2 * chunk_of(p) + 3})
    inputs = steered(d, shape, "first", 7)
    inputs["K"][:, :, 100, 3] = np.nan        # rows 100.. see it, rows before are masked
    out, ok, verdicts = check(d, p, inputs, shape)
    assert ok, {n: v.message for n, v in verdicts.items()}
    o = out["O"].astype(np.float32)
    assert np.all(o[:, :, :5] == 0)
    assert not np.isnan(o[:, :, :100]).any() and np.isnan(o[:, :, 100:]).all()


@pytest.mark.parametrize("kind, skipped", [("first", True), ("rising", False)])
def test_the_skip_is_bit_identical_and_the_data_takes_both_sides(kind, skipped):
    """Against the same kernel rescaling every chunk (the vote forced true), the outputs are
    the same bits. With the rescale never run (forced false), the spike's data still gives
    those bits (after the first chunk, whose running maximum was -inf and accumulators 0,
    every warp skips) and the ramp's does not (its warps rescale)."""
    d = library("attention", "f16")
    p = flash_plan(d)
    shape = with_static(d, {"b": 1, "h": 2, "q": 37, "x": 3 * chunk_of(p) + 5})
    inputs = steered(d, shape, kind, 11)
    out = run_plan(p, inputs, shape, timeout_s=240)["O"]
    always = run_plan(p, inputs, shape, timeout_s=240,
                      edit=lambda s: s.replace(VOTE, "if (true)"))["O"]
    never = run_plan(p, inputs, shape, timeout_s=240,
                     edit=lambda s: s.replace(VOTE, "if (false)"))["O"]
    assert out.tobytes() == always.tobytes()
    assert (out.tobytes() == never.tobytes()) == skipped


# each bug with the data that shows it: inverting the test still rescales a warp that holds
# one unchanged row (mixed data), so it shows where every row changes
SKIP_BUGS = {
    "skipped when a maximum changed": ("rising", lambda s: s.replace(
        "rch | (rs != 1.0f)", "rch | (rs == 1.0f)")),
    "a warp skips unless every lane's rows changed": ("mixed", lambda s: s.replace(
        VOTE, VOTE.replace("__any_sync", "__all_sync"))),
    "only the lane's first row votes": ("mixed", lambda s: s.replace(
        "rch = rch | (rs != 1.0f);", "rch = i1 == 0 ? (rch | (rs != 1.0f)) : rch;")),
}


@pytest.mark.parametrize("bug", list(SKIP_BUGS))
def test_seeded_bugs_in_the_skip_give_wrong_values(bug):
    d = library("attention", "f16")
    p = flash_plan(d)
    shape = with_static(d, {"b": 1, "h": 2, "q": 37, "x": 3 * chunk_of(p) + 1})
    kind, edit = SKIP_BUGS[bug]
    inputs = steered(d, shape, kind, 3)
    assert check(d, p, inputs, shape)[1]
    assert not check(d, p, inputs, shape, edit=edit)[1]
