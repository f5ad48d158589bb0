"""Work beside a tensor-core product (compiler/tensorcore.Site.computed and .stats): an operand
computed from loads as its tile is staged (codegen/computed._copy_computed: `X * g`, `gelu(X)`)
and reductions of the product's rows or columns over the contracted axis computed chunk by
chunk for the epilogue (codegen/rowstats.py: RMSNorm's `mean[i](X * X)`, a weight norm's
`sum[i](W * W)`, an absmax, a logsumexp). Run by the CPU emulator against the float64
reference at odd sizes (one value at a time) and multiples of 8 (8 values from one 16-byte
load), on the plan's tiles and on retiled ones; seeded bugs must be caught; the model
charges what is computed as it is staged."""

from __future__ import annotations

import re

import numpy as np
import pytest

import napkin
from napkin.compiler import issue, schedule
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan
from napkin.runtime.interpret import interpret
from napkin.runtime import compare
from napkin.commands.run import random_inputs

from .conftest import library
from .test_tensor_cores import assert_close, retiled, tc_plan, verdicts

HEAD = "axis t, i, o\n"
CASES = {
    # a column statistic: weight normalisation
    "weight_norm": HEAD + "in X[t i]: f16\nin W[i o]: f16\nY[t o] = X * W * rsqrt(sum[i](W * W))\nout Y: f16",
    # a row's absolute maximum (a quantisation scale)
    "absmax": HEAD + "in X[t i]: f16\nin W[i o]: f16\nY[t o] = X * W / max[i](abs(X))\nout Y: f16",
    # a row's logsumexp beside a product of a transposed weight, into f32
    "logsumexp": HEAD + "in X[t i]: bf16\nin W[o i]: bf16\nY[t o] = X * W - logsumexp[i](X)\nout Y: f32",
    # an operand computed from a load, nothing beside
    "gelu_operand": HEAD + "in X[t i]: f16\nin W[i o]: f16\nY[t o] = gelu(X) * W\nout Y: f16",
    # RMSNorm into a batched product, bf16
    "batched": "axis b, t, i, o\nin X[b t i]: bf16\nin g[i]: bf16\nin W[b i o]: bf16\n"
               "Y[b t o] = X * g * W * rsqrt(mean[i](X * X) + 1e-6)\nout Y: bf16",
    # X stored with its rows contiguous: the operand runs 8 rows at a time, the mean one
    # value at a time
    "transposed": HEAD + "in X[i t]: f16\nin g[i]: f16\nin W[i o]: f16\n"
                  "Y[t o] = X * g * W * rsqrt(mean[i](X * X) + 1e-6)\nout Y: f16",
    # the smallest value of a row, its minimum beside a masked epilogue
    "min": HEAD + "in X[t i]: f16\nin W[i o]: f16\nY[t o] = where(t >= o, X * W + min[i](X), 0)\nout Y: f16",
    # both operands computed from loads: each rounded to its loads' 16-bit dtype
    "both_computed": HEAD + "in X[t i]: f16\nin W[i o]: f16\nY[t o] = relu(X) * exp(W * 0.1)\nout Y: f16",
    "both_computed_bf16": HEAD + "in X[t i]: bf16\nin g[i]: bf16\nin W[o i]: bf16\n"
                          "Y[t o] = gelu(X * g) * sigmoid(W)\nout Y: f32",
}
ODD = {"b": 2, "t": 37, "i": 41, "o": 19}
EIGHTS = {"b": 2, "t": 45, "i": 72, "o": 24}


def diagram(name: str):
    return library(name, "f16") if name == "rmsnorm_linear" else napkin.load(CASES[name])


def shape(d, sizes):
    return {a: s for a, s in sizes.items() if a in d.axes}


@pytest.mark.parametrize("name", ["rmsnorm_linear", *CASES])
def test_beside_the_product_on_tensor_cores_matches_the_reference(name):
    d = diagram(name)
    p = tc_plan(d)
    (kp,) = p.kernels
    assert kp.schedule.engine == schedule.PRODUCT
    site = kp.schedule.site
    assert site.computed or site.stats
    for sizes in (ODD, EIGHTS):
        assert_close(d, p, shape(d, sizes))


def test_rmsnorm_linear_bf16_and_the_interpreter():
    d = library("rmsnorm_linear", "bf16")
    p = tc_plan(d)
    assert_close(d, p, {"t": 130, "i": 96, "o": 72}, seed=3)
    inputs = random_inputs(d, {"t": 37, "i": 41, "o": 19}, 1)
    for v in compare.against_reference(d, inputs, interpret(p, inputs), plan=p).values():
        assert v.ok, v.message


@pytest.mark.parametrize("chunk, tiles", [
    (16, {"t": (32, 1), "o": (16, 1)}),      # one warp, 32 rows a thread's two (T < R)
    (64, {"t": (64, 2), "o": (32, 2)}),
    (32, {"t": (16, 1), "o": (64, 4)}),      # 128 threads over 16 rows: 8 lanes a row
])
def test_retiled(chunk, tiles):
    d = library("rmsnorm_linear", "f16")
    p = retiled(tc_plan(d), chunk, tiles)
    for sizes in (ODD, EIGHTS):
        assert_close(d, p, shape(d, sizes))


BUGS = {
    # the lanes of a row never merge: each keeps its share of the mean
    "merge dropped": lambda s: re.sub(r"(rst\d+\[i6\]) = \1 \+ (v\d+);", r"\1 = \1;", s),
    # the 16-byte load's values all taken from its first
    "vector offset": lambda s: re.sub(r"napkin_half_at\((lv\d+), \d\)", r"napkin_half_at(\1, 0)", s),
    # the gain never multiplies the operand
    "gain dropped": lambda s: re.sub(r"napkin_half_at\((lv1), (\d)\)", r"1.0f", s),
    # the mean's fold forgets the chunk's tail: the last chunk's positions past the row's end
    # (the next row's values) enter it
    "tail kept": lambda s: s.replace("if (spos < clen && ", "if ("),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bugs_give_wrong_values(bug):
    d = library("rmsnorm_linear", "f16")
    p = retiled(tc_plan(d), 16, {"t": (128, 2), "o": (256, 4)})
    sizes = {"t": 45, "i": 40, "o": 24}
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    source = render(lower(p))
    assert BUGS[bug](source) != source, bug
    assert all(v.ok for v in verdicts(d, p, sizes))
    assert not all(v.ok for v in verdicts(d, p, sizes, source_edit=BUGS[bug])), bug


def test_the_model_charges_what_is_computed_as_it_is_staged():
    """At 4096^3 on h100: on tensor cores, X and g read where the operand and the mean are
    computed (not copied), their work per chunk in the issue slots: more than the plain
    matmul issues, less than the CUDA-core plan takes."""
    sizes = {"t": 4096, "i": 4096, "o": 4096}
    p = plan(library("rmsnorm_linear", "f16"), "h100", sizes)
    (kp,) = p.kernels
    assert kp.schedule.engine == schedule.PRODUCT
    g = p.graph
    from napkin.compiler.model import array_name
    assert sorted(array_name(g, n) for n in kp.model.direct) == ["X", "g"]
    assert [(width, reads, operand) for _, _, width, reads, operand in kp.model.staged] == \
        [(8, 2, True), (8, 1, False)]
    mm = plan(napkin.load("matmul"), "h100", {"m": 4096, "n": 4096, "k": 4096}).kernels[0]
    issued = dict(kp.cost.compute_parts)["issue"]
    assert issued > 1.3 * dict(mm.cost.compute_parts)["issue"]
    # the staged runs are in the issue slots: every warp's, every chunk, every block
    import dataclasses
    from napkin.compiler.cost import evaluate
    per_warp = issue.staged(kp.model, kp.choice, dict(kp.choice.group) | dict([kp.choice.stream]),
                            kp.schedule.threads)
    bare = evaluate(dataclasses.replace(kp.model, staged=()), kp.columns, kp.choice, p.sizes,
                    p.target)
    runs = float(kp.cost.levels[1].units) * kp.schedule.threads / 32 * (4096 / kp.choice.stream[1])
    assert per_warp > 50
    assert issued - dict(bare.compute_parts)["issue"] == pytest.approx(
        per_warp * runs / p.target.per_second("schedulers"), rel=1e-6)
    simt = plan(library("rmsnorm_linear", "f16"), "h100", sizes, engine="cuda-cores").kernels[0]
    assert kp.cost.time < simt.cost.time / 4


@pytest.mark.parametrize("name, dtype", [("both_computed", "f16"), ("both_computed_bf16", "bf16")])
def test_two_computed_operands_are_priced_in_their_loads_dtype(name, dtype):
    """`relu(X) * exp(W * 0.1)`: the model's product runs in the loads' 16-bit dtype, as the
    lowering stages it (tensorcore._computed_dtype), its tensor-core time counted (an f32
    product has no tensor rate: its time was 0)."""
    p = plan(napkin.load(CASES[name]), "h100", {"t": 4096, "i": 4096, "o": 4096},
             engine="tensor-cores")
    (kp,) = p.kernels
    assert kp.schedule.site.dtype == dtype and len(kp.schedule.site.computed) == 2
    assert [w.dtype for w in kp.model.work if w.engine == "contraction"] == [dtype]
    assert dict(kp.cost.compute_parts)["tensor"] > 0


def test_a_reduction_without_a_merge_beside_the_product_stays_on_cuda_cores():
    d = napkin.load(HEAD + "in X[t i]: f16\nin W[i o]: f16\nY[t o] = X * W + argmax[i](X)\nout Y: f16")
    p = tc_plan(d)
    assert p.kernels[0].schedule.engine == schedule.SIMT
    from napkin.explain import render_text, report
    assert "the kernel fuses `argmax[i]` with the product" in render_text(report(p, compare=False))


# RMSNorm written as people write it: normalise, then multiply (compiler/canonical._hoisted
# takes the row's factor out of the sum over i)
TWO_EQUATIONS = HEAD + """in X[t i]: {dt}
in g[i]: {dt}
in W[i o]: {dt}
N[t i] = X * rsqrt(mean[i](X * X) + 1e-6) * g
Y[t o] = N * W
out Y: {dt}"""


@pytest.mark.parametrize("text", [
    TWO_EQUATIONS.format(dt="f16"),
    # one equation, the factor first: the sum over i is placed around all of it
    HEAD + "in X[t i]: bf16\nin g[i]: bf16\nin W[i o]: bf16\n"
           "Y[t o] = X * rsqrt(mean[i](X * X) + 1e-6) * g * W\nout Y: bf16",
    # N is an output too: its kernel stores N (and the row's factor, which the product's
    # kernel loads), the product computes X * g again
    TWO_EQUATIONS.format(dt="f16").replace("out Y: f16", "out Y: f16, N: f16"),
])
def test_a_factor_constant_along_the_sum_leaves_it(text):
    d = napkin.load(text)
    p = tc_plan(d)
    (product,) = [kp for kp in p.kernels if kp.schedule.engine == schedule.PRODUCT]
    assert product.schedule.site.computed
    if "N: f16" not in text:
        assert len(p.kernels) == 1 and product.schedule.site.stats
    for sizes in (ODD, EIGHTS):
        assert_close(d, p, shape(d, sizes))


@pytest.mark.parametrize("norm", ["g * X / sqrt(mean[i](X * X) + 1e-6)"])
def test_a_dividing_factor_constant_along_the_sum_leaves_it(norm, within_budget):
    """RMSNorm with its statistic dividing (`X / sqrt(...)`): canonical._factors read
    products only, so the quotient stayed inside the sum: two kernels, N stored (346 us
    against 317 us at t=i=o=4096, h100, model); now one, the product's row factor beside."""
    text = TWO_EQUATIONS.format(dt="f16").replace(
        "X * rsqrt(mean[i](X * X) + 1e-6) * g", norm)
    d = napkin.load(text)
    p = tc_plan(d)
    (product,) = p.kernels
    assert product.schedule.engine == schedule.PRODUCT and product.schedule.site.stats
    sizes = shape(d, ODD)
    inputs = random_inputs(d, sizes, 4)
    within_budget(d, inputs, interpret(plan(d, "h100", sizes), inputs))


def test_a_factor_taken_out_of_a_sum_takes_its_axes_with_it(rng, within_budget):
    """`Y[i] = E * A * B` sums over l: E[i] leaves the sum, and the sum itself has no `i`
    (it was typed [i], and the interpreter failed on it: a fuzz case of 2026-12-06,
    tests/regressions/fuzz-c82118e7700e)."""
    from napkin.compiler.canonical import canonicalize
    from napkin.compiler import ir
    d = napkin.load("axis i, l\nin E[i]: f32\nin A[l]: f32\nin B[l]: f32\n"
                    "Y[i] = E * A * B\nout Y: f32")
    g = canonicalize(d.ir)
    (c,) = [n for n in g.nodes if isinstance(ir.op(g, n), ir.Contract)]
    assert ir.type_of(g, c).axes == ()
    inputs = {"E": rng.standard_normal(5).astype(np.float32),
              "A": rng.standard_normal(33).astype(np.float32),
              "B": rng.standard_normal(33).astype(np.float32)}
    p = plan(d, "h100", {"i": 5, "l": 33})
    within_budget(d, inputs, interpret(p, inputs))
    within_budget(d, inputs, run_plan(p, inputs, p.sizes))


def test_a_declared_storage_dtype_keeps_its_rounding():
    """`N[t i]: f16 = ...` asks for N rounded to f16 before the product: the factor stays
    inside (the product's operand is N, computed in another kernel)."""
    text = TWO_EQUATIONS.format(dt="f16").replace("N[t i] =", "N[t i]: f16 =")
    p = tc_plan(napkin.load(text))
    assert len(p.kernels) == 2
    (product,) = [kp for kp in p.kernels if kp.schedule.engine == schedule.PRODUCT]
    assert not product.schedule.site.stats


def test_the_memory_table_shows_what_is_staged():
    """explain's shared-memory rows are the computed operand's tile and the mean's row buffer
    beside W's tile (X and g are read from global memory where X * g is computed), and they
    add up to the level's M."""
    from napkin.compiler.buffers import buffers
    p = plan(library("rmsnorm_linear", "f16"), "h100", {"t": 4096, "i": 4096, "o": 4096})
    (kp,) = p.kernels
    smem = [r for r in buffers(p, kp) if r["level"] == "smem"]
    assert [(r["name"], r["role"]) for r in smem] == [
        ("Y:mul", "operand computed as staged"), ("Y:mean[i]", "row statistic"),
        ("W", "input tile")]
    assert sum(r["bytes"] for r in smem) == kp.cost.levels[1].M


def test_a_split_product_of_a_computed_operand_is_refused_naming_the_split_axis():
    """`(X * g) * W` with the contraction split (--split i=3): tensor cores stage a split's
    operands as loads only, so --engine tensor-cores says so, naming the user's axis `i` (not
    its share `s_i`) and the split; the planner keeps the CUDA cores, which compute it."""
    d = napkin.load(HEAD + "in X[t i]: f16\nin g[i]: f16\nin W[i o]: f16\n"
                    "Y[t o] = (X * g) * W\nout Y: f16")
    sizes, split = {"t": 5, "i": 37, "o": 9}, {"split": {"i": 3}}
    with pytest.raises(napkin.NapkinError) as exc:
        plan(d, "h100", sizes, split, engine="tensor-cores")
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0606" and "over `i` is split (--split)" in diag.message, diag.message
    p = plan(d, "h100", sizes, split)
    assert p.kernels[0].schedule.engine == schedule.SIMT
    assert_close(d, p, sizes)


@pytest.mark.parametrize("operand", ["relu(X)", "X * g"])
def test_an_operand_computed_from_an_f32_input_is_never_rounded(operand):
    """`relu(X)` of an f32 input X beside an f16 weight: the f32 is the user's precision, as
    X itself would be (tensorcore._rounded), so the product stays on the CUDA cores and
    --engine tensor-cores says why, where it was rounded to f16 as it was staged."""
    d = napkin.load(HEAD + f"in X[t i]: f32\nin g[i]: f16\nin W[i o]: f16\n"
                    f"Y[t o] = {operand} * W\nout Y: f32".replace(
                        "in g[i]: f16\n", "in g[i]: f16\n" if "g" in operand else ""))
    sizes = {"t": 2048, "i": 2048, "o": 2048}
    assert plan(d, "h100", sizes).kernels[0].schedule.engine == schedule.SIMT
    with pytest.raises(napkin.NapkinError) as exc:
        plan(d, "h100", sizes, engine="tensor-cores")
    assert "operands are f32 and f16" in exc.value.diagnostics[0].message
