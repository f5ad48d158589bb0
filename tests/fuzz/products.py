"""Random matrix products on tensor cores: any axis order of the operands and the result,
batch axes, an epilogue, operands computed from loads (either or both) and a reduction over
the contracted axis beside the product, f16 or bf16, any legal tiling and warp layout, odd sizes.

Each case is forced onto the tensor-core lowering (whatever the planner would pick at
its sizes), emitted, run by the CPU emulator and compared with the float64 reference
(`check`). Used by test_tensor_cores.py and benchmarks/fuzz.py."""

from __future__ import annotations

import dataclasses
import re

from hypothesis import strategies as st

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import ir, kernels, tensorcore, warps
from napkin.compiler.columns import columns
from napkin.compiler.cost import evaluate
from napkin.compiler.model import kernel_model
from napkin.compiler.kernel_plan import kernel_plan
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import Source
from napkin.runtime import compare
from napkin.pipeline import run_plan

# odd sizes, and multiples of 8 (rows 16-byte aligned: the cp.async copies)
SIZES = st.one_of(st.integers(1, 80), st.sampled_from([8, 16, 24, 40, 64, 72]))
EPILOGUES = ["{p}", "relu({p})", "gelu({p} + bias)", "where(m >= n, {p}, -2.0)",
             "{p} * 0.5 + bias", "sigmoid({p}) * bias"]
# the first operand as loaded or computed from loads as it is staged (Site.computed), and a
# factor reduced over k beside the product (Site.stats: a row's, a column's)
OPERANDS = ["A", "A", "relu(A)", "A * g", "exp(A * 0.25)"]
# ... and the second: both may be computed (each rounded to its loads' dtype)
SECOND = ["B", "B", "B", "relu(B)", "exp(B * 0.25)"]
BESIDE = ["", "", " * rsqrt(mean[k](A * A) + 1.0)", " * max[k](abs(B))",
          " * exp(0.0 - logsumexp[k](A * 0.5))", " * sum[k](B * g)", " * min[k](A)"]
TILINGS = [(bm, bn, bk, wm, wn) for bm in (16, 32, 64, 128) for bn in (8, 16, 32, 64, 128)
           for bk in (16, 32, 64) for wm in (1, 2, 4) for wn in (1, 2, 4, 8)
           if wm * wn <= 8 and bm % (16 * wm) == 0 and bn % (8 * wn) == 0
           and (bm // wm) * (bn // wn) // 32 <= tensorcore.MAX_ACCUMULATORS]


@st.composite
def products(draw):
    batch = draw(st.sampled_from([(), ("b",), ("b", "c")]))
    # each batch axis in both operands, or in one only (a weight shared by the batch)
    where = [draw(st.sampled_from(["both", "A", "B"])) for _ in batch]
    a = draw(st.permutations(("m", "k") + tuple(x for x, w in zip(batch, where) if w != "B")))
    b = draw(st.permutations(("k", "n") + tuple(x for x, w in zip(batch, where) if w != "A")))
    c = draw(st.permutations(("m", "n") + batch))
    dtype = draw(st.sampled_from(["f16", "bf16"]))
    out = draw(st.sampled_from(["f16", "bf16", "f32"]))
    product = (f"{draw(st.sampled_from(OPERANDS))} * {draw(st.sampled_from(SECOND))}"
               f"{draw(st.sampled_from(BESIDE))}")
    body = draw(st.sampled_from(EPILOGUES)).format(p=product)
    axes = ", ".join(("m", "k", "n") + batch)
    text = (f"axis {axes}\nin A[{' '.join(a)}]: {dtype}\nin B[{' '.join(b)}]: {dtype}\n"
            f"in bias[n]: {dtype}\nin g[k]: {dtype}\nC[{' '.join(c)}] = {body}\nout C: {out}")
    if "bias" not in body:
        text = text.replace(f"in bias[n]: {dtype}\n", "")
    if not re.search(r"\bg\b", body):
        text = text.replace(f"in g[k]: {dtype}\n", "")
    sizes = {"m": draw(SIZES), "k": draw(SIZES), "n": draw(SIZES),
             "b": draw(st.integers(1, 3)), "c": 2}
    return text, {x: s for x, s in sizes.items() if x in ("m", "k", "n") + batch}, \
        draw(st.sampled_from(TILINGS))


def forced(d, bm, bn, bk, wm, wn):
    """The diagram's one kernel, planned on tensor cores with this tiling."""
    p = plan(d, "h100", {a: 1024 for a, s in d.axes.items() if s is None})
    (kp,) = p.kernels
    model = kernel_model(p.graph, kp.kernel, "k")
    site = tensorcore.site(p.graph, kp.kernel, model, p.target, p.sizes)
    assert site is not None and site.red == "k"
    return _forced(p, kp.kernel, model, site, bk, {site.row: (bm, wm), site.col: (bn, wn)})


def _forced(p, kernel, model, site, chunk: int, tiles: dict):
    """The plan `p` as this one kernel with a tensor-core choice: `tiles` gives each
    fragment axis its (block tile, warps); batch axes take one position per block."""
    ones = {a: 1 for a in site.batch}
    choice = warps.tiled_choice({**{a: t for a, (t, _) in tiles.items()}, **ones}, p.sizes,
                                (site.red, chunk), {**{a: t // w for a, (t, w) in tiles.items()},
                                                    **ones},
                                {a: w for a, (_, w) in tiles.items()}, tuple(tiles))
    cols = columns(p.graph, model)
    cost = evaluate(model, cols, choice, p.sizes, p.target)
    kp = kernel_plan(p.graph, kernel, model, cols, choice, cost, (), p.sizes, p.target)
    return dataclasses.replace(p, kernels=(kp,))


def check(case) -> None:
    """Raise AssertionError (with the case) when the emulated kernel misses the reference."""
    text, shape, tiling = case
    d = napkin.load(Source("<fuzz>", text))
    p = forced(d, *tiling)
    _agrees(d, p, shape, shape, (text, shape, tiling))


# -- attention ------------------------------------------------------------------------------

MASKS = ["{s}", "where(x <= q, {s}, -inf)", "where(x >= q + 2 or x < 1, {s}, -inf)",
         "{s} + bias", "where(q >= 3, {s}, -inf)"]
EPILOGUE_O = ["{o}", "{o} * 2.0 + 1.0", "relu({o})"]
FLASH_TILINGS = [(bm, wm, bc) for bm in (16, 32, 64, 128) for wm in (1, 2, 4, 8)
                 for bc in (16, 32, 64, 128) if bm % (16 * wm) == 0 and bm // (16 * wm) <= 2]


@st.composite
def attentions(draw):
    """Attention with random layouts, batch axes shared or not by K and V, head sizes, masks."""
    batch = draw(st.sampled_from([(), ("b",), ("b", "h")]))
    kv_batch = tuple(a for a in batch if draw(st.booleans()) or a == "b")   # GQA: h only in Q
    head = draw(st.sampled_from([16, 32, 48, 64]))
    width = draw(st.sampled_from([8, 16, 24, 64]))
    value = "d" if width == head and draw(st.booleans()) else "e"
    qa = draw(st.permutations(("q", "d") + batch))
    ka = draw(st.permutations(("x", "d") + kv_batch))
    # V may vary along a batch axis K lacks (a batch axis then, never the rows: flash.own_rows)
    v_batch = tuple(a for a in batch if a in kv_batch or draw(st.booleans()))
    va = draw(st.permutations(("x", value) + v_batch))
    oa = draw(st.permutations(("q", value) + batch))
    dtype = draw(st.sampled_from(["f16", "bf16"]))
    scale = draw(st.sampled_from(["Q * K", "Q * K / sqrt(size(d))", "Q * K * 0.3"]))
    mask = draw(st.sampled_from(MASKS)).format(s=scale)
    out = draw(st.sampled_from(EPILOGUE_O)).format(o="P * V")
    axes = ", ".join(("q", "x") + batch)
    statics = f"axis d = {head}" + (f"\naxis e = {width}" if value == "e" else "")
    sa = " ".join(a for a in qa if a != "d") + " x"
    text = (f"axis {axes}\n{statics}\nin Q[{' '.join(qa)}]: {dtype}\nin K[{' '.join(ka)}]: {dtype}\n"
            f"in V[{' '.join(va)}]: {dtype}\n"
            + (f"in bias[q x]: {dtype}\n" if "bias" in mask else "")
            + f"S[{sa}] = {mask}\nP[{sa}] = softmax[x](S)\nO[{' '.join(oa)}] = {out}\n"
            f"out O: {draw(st.sampled_from(['f16', 'bf16', 'f32']))}")
    sizes = {"q": draw(SIZES), "x": draw(st.one_of(SIZES, st.integers(90, 150))),
             "b": draw(st.integers(1, 2)), "h": draw(st.integers(1, 3))}
    return text, {a: s for a, s in sizes.items() if a in ("q", "x") + batch}, \
        draw(st.sampled_from(FLASH_TILINGS))


def forced_attention(d, bm, wm, bc):
    """All of the diagram in one kernel (whatever fusion would pick), planned as
    FlashAttention-2 with this tiling."""
    p = plan(d, "h100", {a: 4096 if a in ("q", "x") else 2 for a, s in d.axes.items() if s is None},
             {"split": {"x": 1}})          # unsplit: the whole attention in one kernel
    g = p.graph
    kernel = kernels.fused_kernel(g, "k0", {n for n, data in g.nodes(data=True) if data["stmt"] is not None
                                     and not isinstance(data["op"], (ir.Input, ir.Output))})
    model = kernel_model(g, kernel, "x")
    site = tensorcore.site(g, kernel, model, p.target, p.sizes)
    assert isinstance(site, tensorcore.FlashSite), tensorcore.examine(g, kernel, model, p.target,
                                                                      p.sizes)
    return _forced(p, kernel, model, site, bc, {site.row: (bm, wm)})


def check_attention(case) -> None:
    text, shape, tiling = case
    d = napkin.load(Source("<fuzz>", text))
    p = forced_attention(d, *tiling)
    sizes = {**shape, **{a: s for a, s in d.axes.items() if s is not None}}
    _agrees(d, p, sizes, shape, (text, shape, tiling))


def _agrees(d, p, sizes: dict, shape: dict, case) -> None:
    """The emulated plan's outputs against the float64 reference, on inputs seeded by shape."""
    inputs = random_inputs(d, sizes, sum(shape.values()))
    for verdict in compare.against_reference(d, inputs, run_plan(p, inputs, sizes),
                                                plan=p).values():
        assert verdict.ok, case + (verdict.message,)
