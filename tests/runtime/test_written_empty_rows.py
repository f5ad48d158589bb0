"""A recognised spelling computes what is written on rows with no finite maximum: softmax
written out (`E / sum[x](E)`, E = exp(S - max[x](S))) is NaN on a fully masked row (and
`E * V / sum[x](E)` where x is empty), where the built-in `softmax` gives 0
(compiler/written.py marks the op, ir.Softmax's `written`; docs/language.md). Each
lowering is run on the emulator (or the interpreter) against the float64 reference, NaNs in
the same places, and the plan is shown to be the lowering named: FlashAttention's finish
(mma.sync), the CUDA cores' online softmax, a split's merge (its own kernel, or the last
blocks'), a standalone softmax's two passes, its rows on the CUDA cores, its split, and a
softmax over three axes written out again. Logsumexp and the variance written out are held
at fully masked rows and at sizes 0 and 1. Every case fails on main (0 where the reference
is NaN; logsumexp over an empty axis NaN where it is -inf)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.api import prepare_run
from napkin.commands.run import random_inputs
from napkin.compiler import ir
from napkin.compiler.plan import plan
from napkin.runtime import compare

# the brief's diagram: rows q < 20 see no key (an additive -inf mask)
ATTENTION = """axis q, x
axis d = 16
in Q[q d]: {dt}
in K[x d]: {dt}
in V[x d]: {dt}
S[q x] = Q * K / sqrt(size(d)) + where(x <= q - 20, 0.0, -inf)
M[q] = max[x](S)
E[q x] = exp(S - M)
P[q x] = E / sum[x](E)
O[q d] = P * V
out O: {dt}
"""

# a mask by `where`, the exponentials spelt twice, `E * V / l`
ATTENTION_TWICE = """axis q, x
axis d = 16
in Q[q d]: {dt}
in K[x d]: {dt}
in V[x d]: {dt}
S[q x] = where(x <= q - 20, Q * K / sqrt(size(d)), -inf)
O[q d] = exp(S - max[x](S)) * V / sum[x](exp(S - max[x](S)))
out O: {dt}
"""

SOFTMAX = """axis q, x
in S[q x]: {dt}
M[q] = max[x](S)
E[q x] = exp(S - M)
P[q x] = E / sum[x](E)
out P: f32
"""

# read beside another array at long rows: the CUDA cores' softmax rows (codegen/softmax_rows.py)
SOFTMAX_PLUS = """axis q, x
in S[q x]: {dt}
in B[q x]: {dt}
M[q] = max[x](S)
E[q x] = exp(S - M)
P[q x] = E / sum[x](E) + B
out P: f32
"""

SOFTMAX_3 = """axis b, x, y, z
in X[x b y z]: {dt}
M[b] = max[x y z](X)
E[x b y z] = exp(X - M)
P[x b z y] = E / sum[x y z](E)
out P: f32
"""

LOGSUMEXP = """axis q, x
in S[q x]: f32
M[q] = max[x](S)
L[q] = M + log(sum[x](exp(S - M)))
out L: f32
"""

VARIANCE = """axis r, c
in X[r c]: f32
V[r] = mean[c]((X - mean[c](X)) ** 2)
W[r] = mean[c]((X - mean[c](X)) * (X - mean[c](X)))
out V, W: f32
"""


def qkv(d, sizes, seed):
    return random_inputs(d, sizes, seed)


def scores(d, sizes, seed):
    """Random scores S[q x], rows 0, 3, 6... fully masked and rows 1, 4, 7... half masked."""
    inputs = random_inputs(d, sizes, seed)
    inputs["S"][::3] = -np.inf
    inputs["S"][1::3, ::2] = -np.inf
    return inputs


def scores_3(d, sizes, seed):
    inputs = random_inputs(d, sizes, seed)
    inputs["X"][:, 1] = -np.inf          # batch 1 fully masked
    return inputs


def softmaxes(p) -> list[tuple[str, tuple, bool]]:
    """(engine, axes, written) of every softmax the plan's kernels compute."""
    return [(k.schedule.engine, ir.op(p.graph, n).axes, ir.op(p.graph, n).written)
            for k in p.kernels for n in k.kernel.nodes
            if isinstance(ir.op(p.graph, n), ir.Softmax)]


def run_checked(text, dt, make, sizes, backend="emulate", seed=7, **hints):
    """The outputs on `backend` with the plan that ran, checked against the float64
    reference (NaN in the same places); the plan; and the reference's NaN count, which must
    be positive: a check that holds with no NaN row tests nothing here."""
    d = napkin.load(text.format(dt=dt))
    kernel, inputs = prepare_run(d, (), make(d, sizes, seed), backend=backend, **hints)
    outs = dict(zip([s.name for s in d.outputs], kernel(**inputs)))
    p = getattr(kernel, "plan", None)
    verdicts = compare.against_reference(d, inputs, outs, plan=p)
    assert all(v.ok for v in verdicts.values()), {n: v.message for n, v in verdicts.items()}
    ref, _, _ = compare.references(d, inputs, None, False)
    return p, sum(int(np.isnan(r).sum()) for r in ref.values())


# (text, inputs, sizes, hints, the lowering: (engine, softmax axes, written) it must plan)
FLASH = ("attention", ("x",), "div")
SIMT_PAIR = ("cuda cores", ("x",), "div")
LOWERINGS = {
    "flash-f16": (ATTENTION, qkv, "f16", dict(q=37, x=37), {}, [FLASH]),
    "flash-bf16-tile": (ATTENTION, qkv, "bf16", dict(q=33, x=65), {}, [FLASH]),
    "flash-twice": (ATTENTION_TWICE, qkv, "f16", dict(q=37, x=31), {},
                    [("attention", ("x",), "contract")]),
    "cuda-cores-pair": (ATTENTION, qkv, "f16", dict(q=37, x=37), dict(engine="cuda-cores"),
                        [SIMT_PAIR]),
    # each split's own softmax is the built-in (a chunk with no key weighs 0); the merge's
    # over p_x keeps the NaN
    "split-merge-kernel": (ATTENTION, qkv, "bf16", dict(q=37, x=129),
                           dict(split={"x": 4}, merge="kernel"),
                           [("attention", ("s_x",), ""), ("cuda cores", ("p_x",), "div")]),
    "split-merge-last-block": (ATTENTION, qkv, "f16", dict(q=37, x=129),
                               dict(split={"x": 4}, merge="last-block"), None),
    "softmax-two-passes": (SOFTMAX, scores, "f16", dict(q=37, x=37), {},
                           [("cuda cores", ("x",), "div")]),
    "softmax-rows": (SOFTMAX_PLUS, scores, "bf16", dict(q=37, x=300), {},
                     [("cuda cores", ("x",), "div")]),
    "softmax-split": (SOFTMAX, scores, "f16", dict(q=3, x=300), dict(split={"x": 4}), []),
    "softmax-3-axes": (SOFTMAX_3, scores_3, "f16", dict(b=3, x=5, y=7, z=9), {}, []),
}


@pytest.mark.parametrize("case", LOWERINGS)
def test_each_lowering_keeps_the_written_nan(case):
    text, make, dt, sizes, hints, expect = LOWERINGS[case]
    p, nans = run_checked(text, dt, make, sizes, **hints)
    assert nans > 0
    if expect is not None:
        assert softmaxes(p) == expect, softmaxes(p)


@pytest.mark.parametrize("case", ["flash-f16", "softmax-two-passes", "softmax-3-axes",
                                  "split-merge-kernel"])
def test_the_interpreter_keeps_the_written_nan(case):
    text, make, dt, sizes, hints, _ = LOWERINGS[case]
    _, nans = run_checked(text, dt, make, sizes, backend="interpret", **hints)
    assert nans > 0


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("text, nans, hints", [
    (ATTENTION, 0, {}), (ATTENTION_TWICE, 5 * 16, {}),
    (ATTENTION, 0, dict(engine="cuda-cores")), (ATTENTION_TWICE, 5 * 16, dict(engine="cuda-cores"))])
def test_an_empty_key_axis_as_written(text, nans, hints, backend):
    """Over an empty x, `E * V / l` is 0 / 0, NaN; `P = E / l` then `P * V` is a sum of
    nothing, 0, as the built-in's: FlashAttention's finish and the CUDA cores' tell them apart
    by the size of x."""
    p, found = run_checked(text, "f16", qkv, dict(q=5, x=0), backend=backend, **hints)
    assert found == nans


def test_the_built_in_softmax_still_gives_0():
    """The same diagram with `softmax[x](S)`: 0 on the masked rows."""
    text = ATTENTION.replace("P[q x] = E / sum[x](E)", "P[q x] = softmax[x](S)")
    d = napkin.load(text.format(dt="f16"))
    inputs = qkv(d, dict(q=37, x=37), 7)
    for backend in ("reference", "emulate"):
        (o,) = napkin.run(d, backend=backend, **inputs)
        o = np.asarray(o, float)
        assert np.all(o[:20] == 0) and np.isfinite(o).all()


def test_flash_attention_is_still_chosen_for_the_written_form():
    d = napkin.load(ATTENTION.format(dt="f16"))
    p = plan(d, "h100", {"q": 4096, "x": 4096})
    assert softmaxes(p) == [FLASH]


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_written_logsumexp_nan_on_masked_rows_and_minus_inf_on_an_empty_axis(backend):
    """NaN on the masked rows at x = 5 and 1 (+ (m - m) in compiler/written.py), -inf over an
    empty x (`-inf + log(0)`, where that term is 0)."""
    d = napkin.load(LOGSUMEXP)
    for x, want_nan in ((5, 3), (1, 5), (0, 0)):     # (x = 1: rows 1, 4 masked too)
        inputs = scores(d, dict(q=7, x=x), 3) if x else {"S": np.zeros((7, 0), np.float32)}
        (out,) = napkin.run(d, backend=backend, **inputs)
        (ref,) = napkin.run(d, backend="reference", **inputs)
        out = np.asarray(out, float)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        assert int(np.isnan(ref).sum()) == want_nan
        assert x or (ref == -np.inf).all()
        special = ~np.isfinite(ref) & ~np.isnan(ref)
        np.testing.assert_array_equal(out[special], ref[special])
        finite = np.isfinite(ref)
        np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-5)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("c", [0, 1, 37])
def test_written_variance_at_sizes_0_and_1(backend, c, rng):
    """Welford's var (the recognised form) agrees with what is written: NaN over an empty c
    (0 / 0), 0 over one position."""
    d = napkin.load(VARIANCE)
    x = rng.standard_normal((5, c)).astype(np.float32)
    outs = napkin.run(d, x, backend=backend)
    refs = napkin.run(d, x, backend="reference")
    for out, ref in zip(outs, refs):
        assert np.isnan(ref).all() if c == 0 else np.isfinite(ref).all()
        np.testing.assert_allclose(np.asarray(out, float), ref, rtol=1e-5, atol=1e-6)


def test_the_gradient_takes_a_masked_row_as_the_built_in_does():
    """The gradient of the written form is the built-in's (docs/language.md): the written
    form's NaN would reach every key's and value's gradient."""
    built_in = ATTENTION.replace("P[q x] = E / sum[x](E)", "P[q x] = softmax[x](S)")
    grads = [napkin.grad(napkin.load(t.format(dt="f16"))) for t in (ATTENTION, built_in)]
    inputs = random_inputs(grads[0], dict(q=37, x=37), 5)
    outs = [napkin.run(g, backend="interpret", **inputs) for g in grads]
    for a, b in zip(*outs):
        assert np.isfinite(np.asarray(a, float)).all()
        np.testing.assert_array_equal(a, b)
