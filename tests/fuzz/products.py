"""Random matrix products on tensor cores: any axis order of the operands and the result,
batch axes, an epilogue, f16 or bf16, any legal tiling and warp layout, odd sizes.

Each case is forced onto the tensor-core lowering (whatever the planner would pick at
its sizes), emitted, run by the CPU emulator and compared with the float64 reference
(`check`). Used by test_tensor_cores.py and benchmarks/fuzz.py."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import tensorcore
from napkin.compiler.columns import columns
from napkin.compiler.cost import Choice, evaluate
from napkin.compiler.model import build
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import Source
from napkin.runtime import compare, reference
from napkin.runtime.emulated import run_plan

EPILOGUES = ["{p}", "relu({p})", "gelu({p} + bias)", "where(m >= n, {p}, -2.0)",
             "{p} * 0.5 + bias", "sigmoid({p}) * bias"]
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
    body = draw(st.sampled_from(EPILOGUES)).format(p="A * B")
    axes = ", ".join(("m", "k", "n") + batch)
    text = (f"axis {axes}\nin A[{' '.join(a)}]: {dtype}\nin B[{' '.join(b)}]: {dtype}\n"
            f"in bias[n]: {dtype}\nC[{' '.join(c)}] = {body}\nout C: {out}")
    if "bias" not in body:
        text = text.replace(f"in bias[n]: {dtype}\n", "")
    sizes = {"m": draw(st.integers(1, 80)), "k": draw(st.integers(1, 90)),
             "n": draw(st.integers(1, 70)), "b": draw(st.integers(1, 3)), "c": 2}
    return text, {x: s for x, s in sizes.items() if x in ("m", "k", "n") + batch}, \
        draw(st.sampled_from(TILINGS))


def forced(d, bm, bn, bk, wm, wn):
    """The diagram's one kernel, planned on tensor cores with this tiling."""
    p = plan(d, "h100", {a: 1024 for a, s in d.axes.items() if s is None})
    (kp,) = p.kernels
    model = build(p.graph, kp.kernel, "k")
    site = tensorcore.site(p.graph, kp.kernel, model, p.target)
    assert site is not None and site.red == "k"
    tiles = {site.row: bm, site.col: bn}
    group = {**tiles, **{a: 1 for a in site.batch}}
    thread = {site.row: bm // wm, site.col: bn // wn, **{a: 1 for a in site.batch}}
    choice = Choice(tuple(sorted(group.items())), ("k", bk), tuple(sorted(thread.items())),
                    warps=((site.row, wm), (site.col, wn)))
    cols = columns(p.graph, model)
    cost = evaluate(model, cols, choice, p.sizes, p.target, tensor_cores=True)
    kp = dataclasses.replace(kp, model=model, columns=cols, choice=choice, cost=cost)
    return dataclasses.replace(p, kernels=(kp,))


def check(case) -> None:
    """Raise AssertionError (with the case) when the emulated kernel misses the reference."""
    text, shape, tiling = case
    d = napkin.load(Source("<fuzz>", text))
    p = forced(d, *tiling)
    inputs = random_inputs(d, shape, sum(shape.values()))
    out = run_plan(p, inputs, shape)["C"]
    verdict = compare.check(out, reference.evaluate(d, inputs)["C"],
                            reference.evaluate(d, inputs, precision="lowp")["C"],
                            d.outputs[0].dtype, "C")
    assert verdict.ok, (text, shape, tiling, verdict.message)
