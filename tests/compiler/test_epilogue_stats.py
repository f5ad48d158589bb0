"""An LM head and its cross-entropy (compiler/epilogue_stats.py): the fused plan the lowering
does not emit yet (the product's tiles reduced over the vocabulary in the epilogue, their
partial states merged like a split) priced from the product's own tiling and the statistics'
own work, and named by explain; the two-kernel plan emitted today emulated against a float64
oracle at odd sizes (labels at the first and last column, a vocabulary under one tile)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import napkin
from napkin.compiler import epilogue_stats
from napkin.compiler.cost import evaluate
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import Source
from napkin.explain import render_text, report
from napkin.pipeline import run_plan

from ..runtime.close import assert_close

HEAD = "axis t, m, v\nin H[t m]: {dt}\nin W[v m]: {dt}\nin label[t]: i32\n"
CE = HEAD + "Z[t v] = H * W\nL[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\nout L: f32\n"
LSE = "axis t, m, v\nin H[t m]: f16\nin W[v m]: f16\nZ[t v] = H * W\nL[t] = logsumexp[v](Z)\n" \
      "out L: f32\n"
BIG = {"t": 4096, "m": 4096, "v": 50257}
UNSPLIT = {"split": {"v": 1}}


def _load(text: str, dt: str = "f16"):
    return napkin.load(Source("<ce>", text.format(dt=dt)))


@pytest.fixture(scope="module")
def big():
    p = plan(_load(CE), "h100", BIG, overrides=UNSPLIT)     # (the planner splits v: below)
    return p, epilogue_stats.for_plan(p)


def test_the_fused_plan_is_priced_from_the_products_own_tiling(big):
    p, rep = big
    assert rep is not None and rep["arrays"] == ["Z", "L"] and not rep["lowered"]
    (k0,) = [kp for kp in p.kernels if kp.model.streaming.axis == "m"]
    tile = dict(k0.choice.group)
    assert rep["tile"] == [tile["t"], tile["v"]]
    parts = -(-BIG["v"] // tile["v"])
    assert rep["parts"] == parts and rep["statistics"] == 2          # the max/sum, the label's
    assert rep["state_bytes"] == 4 * 2 * parts * BIG["t"]
    # not cheaper than the product alone with no store at all, nor than its merge's reads at
    # the target's HBM bandwidth; cheaper than the two kernels (Z's 823 MB written and read)
    alone = evaluate(replace(k0.model, arrays=tuple(a for a in k0.model.arrays
                                                    if a.role != "store")),
                     k0.columns, k0.choice, p.sizes, p.target)
    assert rep["fused_seconds"] >= float(alone.time)
    assert rep["merge_seconds"] >= rep["state_bytes"] / p.target.levels[1].bandwidth
    assert rep["predicted_seconds"] == pytest.approx(rep["fused_seconds"] + rep["merge_seconds"])
    assert rep["predicted_seconds"] < rep["apart_seconds"] == pytest.approx(p.time, rel=0.05)


def test_a_logsumexp_alone_has_one_state_and_an_output_product_says_why_not():
    p = plan(_load(LSE), "h100", BIG, overrides=UNSPLIT)
    rep = epilogue_stats.for_plan(p)
    assert rep is not None and rep["statistics"] == 1
    kept = LSE.replace("out L: f32", "out L: f32\nout Z: f32")
    rep = epilogue_stats.for_plan(plan(_load(kept), "h100", BIG, overrides=UNSPLIT))
    assert rep == {"arrays": ["Z", "L"],
                   "why_not": "`Z` is an output or another kernel reads it (stored all the same)"}


def test_explain_says_why_f32_operands_do_not_fuse():
    """f32 operands have no tensor-core product on these targets: explain says so where it
    would price the fused plan (Z through global memory, L in a kernel of its own)."""
    p = plan(_load(CE, "f32"), "h100", {"t": 64, "m": 64, "v": 50257}, overrides=UNSPLIT)
    (line,) = epilogue_stats.lines(epilogue_stats.for_plan(p), str)      # (explain's words)
    assert "Z and L in one kernel" in line and "`Z` is computed on the CUDA cores: " \
        "operands are f32 and f32; mma.sync m16n8k16 takes two f16 or two bf16" in line


def test_explain_names_the_fused_plan_and_its_figures(big):
    p, rep = big
    text = render_text(report(p))
    line = next(x for x in text.splitlines() if x.startswith("not chosen"))
    assert "Z and L in one kernel, a matmul with row statistics in its epilogue" in line
    assert f"{rep['tile'][0]} x {rep['tile'][1]} tile" in line and "no t x v buffer" in line
    assert "faster than this plan" in text


def test_the_planner_runs_it_split_over_the_vocabulary(big):
    """By default the planner splits v so that a block holds a share whole (197 splits of 256
    columns: compiler/colstats.py) and lowers the product with its statistics in the
    epilogue: 2 kernels, no t x v buffer, faster than the unsplit plan (model: 3.94 against
    4.11 ms, the epilogue after the product's loop priced: column_epilogue.py); explain then
    names no plan of its own."""
    unsplit, rep = big
    p = plan(_load(CE), "h100", BIG)
    assert p.split is not None and (p.split.axis, p.split.parts, p.split.share) == ("v", 197, 256)
    fused = [kp for kp in p.kernels if kp.schedule.site is not None and kp.schedule.site.columns]
    assert len(p.kernels) == 2 and len(fused) == 1
    assert dict(fused[0].choice.group)["s_v"] == 256
    assert float(p.time) < 0.97 * float(unsplit.time)
    assert rep["predicted_seconds"] > float(p.time)   # (the unsplit tiling's own figure)
    assert epilogue_stats.for_plan(p) is None
    assert "not chosen" not in render_text(report(p))


def _oracle(H, W, label):
    z = H.astype(np.float64) @ W.astype(np.float64).T
    m = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - m).sum(axis=1)) + m[:, 0]
    return lse - z[np.arange(len(label)), label]


@pytest.mark.parametrize("dt, t, m, v", [("f16", 19, 37, 71)] + [
    pytest.param(*c, marks=pytest.mark.thorough) for c in
    [("bf16", 19, 37, 71), ("f16", 33, 67, 263), ("bf16", 2, 16, 1), ("f16", 17, 130, 129)]])
def test_the_plan_emitted_today_matches_a_float64_oracle(dt, t, m, v):
    rng = np.random.default_rng(t * 100 + v)
    store = {"f16": np.float16, "bf16": napkin_bf16()}[dt]
    H = (rng.standard_normal((t, m)) * 0.5).astype(np.float32).astype(store)
    W = (rng.standard_normal((v, m)) * 0.5).astype(np.float32).astype(store)
    label = rng.integers(0, v, t).astype(np.int32)
    label[0], label[-1] = 0, v - 1                          # the first and the last column
    p = plan(_load(CE, dt), "h100", {"t": t, "m": m, "v": v})
    out = run_plan(p, {"H": H, "W": W, "label": label}, p.sizes)
    assert_close(out["L"], _oracle(H, W, label), "f32", slack=64)


def napkin_bf16():
    from napkin.runtime.dtypes import numpy_dtype
    return numpy_dtype("bf16")
