"""Decode attention with a value head of its own, wider than a lane's registers hold beside a
split's state (MLA's d = 576 / e = 512, e = 224 .. 512): the split's partial kernel tiles O's
columns across blocks (compiler/flash.COLUMNS on tensor cores; on the CUDA cores `e` is a
woven axis like any other), each block computing its rows' scores and softmax again and
writing their logsumexp, the same value (FusedKernel.woven: a split's state over rows no
longer keeps its value axis from being woven). Planned at scale against the three kernels
that were the only plan (model figures, h100), and emulated against the float64 oracle at
odd sizes: column tiles that leave a partial last one, x divisible by neither the chunk nor
the split, q = 1 and 3, a causal and a key-padding mask, merged by a kernel and in the last
block."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan

THOROUGH = pytest.mark.thorough
DECODE = {"b": 1, "h": 32, "q": 1, "x": 32768}


def wide(d: int, e: int, mask: str = "", shared: bool = False):
    """Attention with a head of d for the scores and e for the values; `mask`: "causal"
    (keys up to 64 past the row), "padding" (a key-padding mask M[b x]); `shared`: K and V
    one per batch, shared by the heads (MLA's latent cache: the heads are the fragment rows)."""
    kv = "b" if shared else "b h"
    scores = "Q * K / sqrt(size(d))"
    if mask == "causal":
        scores = f"where(x <= q + 64, {scores}, -inf)"
    elif mask == "padding":
        scores = f"where(M, {scores}, -inf)"
    return napkin.load(
        f"axis b, h, q, x\naxis d = {d}\naxis e = {e}\nin Q[b h q d]: f16\n"
        f"in K[{kv} x d]: f16\nin V[{kv} x e]: f16\n"
        + ("in M[b x]: bool\n" if mask == "padding" else "")
        + f"S[b h q x] = {scores}\nP[b h q x] = softmax[x](S)\nO[b h q e] = P * V\nout O: f16")


def columns(kp, e: int) -> int:
    """O's columns one block of the partial kernel holds (its tile of e, or all of them)."""
    return int(dict(kp.choice.group).get("e", e))


def _decode(d: int, e: int, shape: dict, shared: bool = False):
    dg = wide(d, e, shared=shared)
    split = plan(dg, "h100", shape)
    three = plan(dg, "h100", shape, {"split": {"x": 1}})
    return split, three


@pytest.mark.parametrize("d, e, shape, shared", [
    (64, 256, DECODE, False),
    pytest.param(576, 512, {"b": 1, "h": 128, "q": 1, "x": 32768}, True, marks=THOROUGH),
    pytest.param(64, 224, DECODE, False, marks=THOROUGH),
    pytest.param(64, 384, DECODE, False, marks=THOROUGH),
    pytest.param(64, 512, DECODE, False, marks=THOROUGH),
    pytest.param(192, 256, DECODE, False, marks=THOROUGH),
    pytest.param(576, 512, {"b": 1, "h": 128, "q": 4, "x": 32768}, True, marks=THOROUGH)])
def test_wide_value_heads_split_at_decode(d, e, shape, shared):
    """The planner splits x, FlashAttention-2 over a tile of e per block, predicted faster
    than the three kernels (S, P, then P V over tiles of e) that were the only plan before
    (model, h100: d=64 e=256 211 us against 235; e=224 190/214, 384 294/316, 512 378/397;
    d=192 e=256 306/319; MLA h=128 q=1 82/679, q=4 300/1771)."""
    split, three = _decode(d, e, shape, shared)
    assert split.split is not None and split.split.axis == "x"
    partial = split.kernels[0]
    assert partial.schedule.engine == "attention" and partial.schedule.site.lse
    assert columns(partial, e) < e
    assert three.split is None and split.time < three.time


def test_explain_says_what_the_column_tiles_recompute():
    from napkin.explain import render_text, report
    p = plan(wide(64, 256), "h100", DECODE, {"split": {"x": 16}})
    found = report(p)
    text = render_text(found)
    assert "e in tiles of 128 across 2 blocks: each computes its rows' scores and softmax " \
           "again (2x Q K, K read 2 times)" in text
    assert "each a 16 x 128 tile of 1 x 16 fragments" in text
    assert found["kernels"][0]["engine"]["column_blocks"] == 2
    # a block holding the whole head says nothing of it
    whole = report(plan(wide(64, 64), "h100", DECODE, {"split": {"x": 16}}))
    assert whole["kernels"][0]["engine"]["column_blocks"] == 1
    assert "in tiles of" not in render_text(whole)


# (a hint fixing a kernel's tiles keeps its merge in a kernel: N0607 with --merge last-block)
CASES = [
    (40, 32, 1, "", "kernel", "tensor-cores"),
    (72, 64, 3, "causal", "kernel", "tensor-cores"),
    (264, 128, 3, "padding", "kernel", "tensor-cores"),
    (264, None, 3, "causal", "last-block", "tensor-cores"),
    pytest.param(264, None, 1, "padding", "last-block", "tensor-cores", marks=THOROUGH),
    (72, None, 3, "causal", "kernel", "cuda-cores"),
    (40, None, 1, "padding", "last-block", "cuda-cores"),
    (264, None, 3, "shared", "kernel", "tensor-cores"),          # MLA's cache: rows h x q
    pytest.param(136, None, 3, "shared", "last-block", "cuda-cores", marks=THOROUGH),
    pytest.param(264, 32, 3, "causal", "kernel", "tensor-cores", marks=THOROUGH),
    pytest.param(264, None, 3, "padding", "last-block", "cuda-cores", marks=THOROUGH)]


@pytest.mark.parametrize("e, tile, q, mask, merge, engine", CASES)
def test_column_tiles_run_on_the_emulator(e, tile, q, mask, merge, engine, within_budget):
    """x = 77 in 3 splits (26 keys each, the last 25), d = 16 (48 with K and V shared by 5
    heads, their rows packed with q's: compiler/packing.py); a tile of e that leaves a
    partial last one (264 = 2 x 128 + 8, 40 = 32 + 8) puts each block's columns at its own
    offset: a wrong offset writes a block's O.part over another's (NaN where none wrote)."""
    shared = mask == "shared"         # K and V shared by the heads: 5 heads x q rows
    dg = wide(48 if shared else 16, e, "" if shared else mask, shared)
    shape = {"b": 1, "h": 5 if shared else 2, "q": q, "x": 77}
    hints = {"split": {"x": 3}}
    if tile is not None:
        hints["group"] = {"e": tile}
    p = plan(dg, "h100", shape, hints, engine=engine, merge=merge)
    partial = p.kernels[0]
    share = p.split.share_axis
    assert share in partial.kernel.reduced(p.graph)
    if engine == "tensor-cores":
        assert partial.schedule.engine == "attention"
        assert bool(partial.schedule.site.packed) == shared      # (the heads' rows packed)
    tiled = min(columns(partial, e), int(dict(partial.choice.thread).get("e", e)))
    assert tiled < e, partial.choice
    assert (p.tail is not None) == (merge == "last-block")
    inputs = random_inputs(dg, shape, 7)
    within_budget(dg, inputs, run_plan(p, inputs, p.sizes))


@pytest.mark.skipif(not __import__("napkin.runtime.nvrtc", fromlist=["x"]).available(),
                    reason="NVRTC wheels not installed")
@pytest.mark.parametrize("d, e, shape, shared", [
    (64, 256, DECODE, False),
    pytest.param(576, 512, {"b": 1, "h": 128, "q": 4, "x": 32768}, True, marks=THOROUGH)])
def test_the_column_tiled_partial_compiles_without_spills(d, e, shape, shared):
    """ptxas (NVRTC, sm_90), the planner's kernels: d=64 e=256 194 registers, MLA 237 (Q
    re-read), e=512 200, d=192 e=256 193 (2026-12-07), none spilled, shared memory within
    the model's M."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.runtime import binaries
    p = plan(wide(d, e, shared=shared), "h100", shape)
    assert columns(p.kernels[0], e) < e
    prog = lower(p)
    compiled = binaries.get(render(prog), "sm_90")
    sizes = {param: p.sizes[axis] for param, axis in prog.size_params}
    for k, kp in zip(prog.kernels, p.kernels):
        r = compiled.resources[k.name]
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0 and r["registers"] <= 255, r
        assert r["smem_bytes"] + k.smem_bytes(sizes) <= kp.cost.levels[1].M, r
