"""The gradient of a gather as a scatter-add (compiler/scatter.py, codegen/scatter.py,
runtime/scatter.py): recognised, chosen by the model, and run on the emulator and the
interpreter against the float64 reference, with duplicate, negative and out-of-range indices
at odd sizes; seeded bugs (a wrong row, a scratch left dirty, a scratch never zeroed) fail."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler import ir
from napkin.compiler.cost import Choice
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.compiler.schedule import SCATTER
from napkin.explain import render_text, report
from napkin.runtime.interpret import interpret
from napkin.runtime.reference import evaluate

from .conftest import emulate_buffers

BIG = {"t": 4096, "v": 32000, "m": 1024}

# extra factors (one read at the matched row), a guard and an f32 output
FACTORS = """axis t, v, m
in tok[t]: i32
in W[t]: f32
in dX[t m]: f32
in B[v m]: f32
dE[v m] = sum[t](where(tok == v and t < size(t) - 3, dX * B, 0) * W)
out dE: f32
"""


def _scattered(d, shape, which=None):
    """The plan of `d` at `shape` with the kernels `which` (names; all scatter sites when
    None) forced to scatter."""
    from napkin.compiler.scatter import site
    p = plan(d, "h100", shape)
    choices = [Choice(scatter=True) if (which is None and site(p.graph, kp.kernel) is not None)
               or (which is not None and kp.kernel.name in which) else kp.choice
               for kp in p.kernels]
    return with_choices(p, choices)


def _tokens(rng, t, v):
    """Duplicates (a third of the positions read row 2), negatives and rows past the table."""
    tok = rng.integers(-3, v + 3, t).astype(np.int32)
    tok[: t // 3] = 2
    tok[-1], tok[-2] = -1, v
    return tok


def _embedding(t, v, m, seed=0):
    rng = np.random.default_rng(seed)
    return {"E": rng.standard_normal((v, m)).astype(np.float16), "tok": _tokens(rng, t, v),
            "dX": rng.standard_normal((t, m)).astype(np.float16)}


def _oracle(d, inputs):
    return evaluate(d, inputs, exact=True)


def test_the_gradient_of_embedding_is_recognised_and_chosen_by_the_model():
    g = napkin.grad("embedding")
    p = plan(g, "h100", BIG)
    (kp,) = p.kernels
    assert kp.schedule.engine == SCATTER and kp.choice == Choice(scatter=True)
    site = kp.schedule.scatter
    assert site.summed == ("t",) and site.axes == ("t", "m")
    assert [(v, ir.op(p.graph, n).name) for v, n in site.matched] == [("v", "tok")]
    assert kp.cost.time < 2e-4          # the dense masked sum: about 13.4 ms (10.9 before
    # the CUDA-core refit, compiler/issue_simt.py: its reads of shared memory fitted to SASS)
    rep = report(p, compare=False)
    assert 5e-3 < rep["kernels"][0]["dense_seconds"] < 5e-2
    text = render_text(rep)
    assert "scatter-add" in text and "atomicAdd" in text
    assert re.search(r"predicted 1\d\.\d ms against 1\d\d us scattered", text), text
    assert "8 blocks per SM limited by threads" in text     # 256 threads, no shared memory
    buffers = {b["name"]: b["bytes"] for b in rep["kernels"][0]["buffers"]}     # its bytes
    assert buffers == {"tok": 4 * BIG["t"], "dX": 2 * BIG["t"] * BIG["m"],
                       "dE:scratch": 4 * BIG["v"] * BIG["m"]}
    # a table of four rows: looking at every position is cheaper than two launches
    small = plan(g, "h100", {"t": 64, "v": 4, "m": 64})
    assert small.kernels[0].schedule.engine != SCATTER


@pytest.mark.thorough      # (3-4 CPU-s of planning at scale)
def test_paged_attentions_cache_gradients_are_scatters_rope_is_not_one_kernel():
    p = plan(napkin.grad("paged_attention"), "h100", {"b": 8, "g": 8, "r": 4, "q": 1, "n": 4096})
    by_store = {ir.op(p.graph, kp.kernel.stores[0]).name: kp for kp in p.kernels}
    for name in ("dKc", "dVc"):
        sched = by_store[name].schedule
        assert sched.engine == SCATTER, name
        assert sorted(v for v, _ in sched.scatter.matched) == ["P", "n"]
        assert set(sched.scatter.summed) == {"b", "x"}
    rope = plan(napkin.grad("rope"), "h100", {"t": 4096, "h": 32})
    assert all(kp.schedule.engine != SCATTER for kp in rope.kernels)


@pytest.mark.parametrize("t,v,m", [(37, 11, 9), (300, 7, 33)])
def test_embedding_gradient_scatters_on_the_emulator_and_the_interpreter(t, v, m):
    g = napkin.grad("embedding")
    p = _scattered(g, {"t": t, "v": v, "m": m})
    assert p.kernels[0].schedule.engine == SCATTER
    inputs = _embedding(t, v, m)
    want = _oracle(g, inputs)["dE"]
    assert np.abs(want[2]).max() > 1 and not np.any(want[[a for a in range(v)
                                                          if a not in inputs["tok"]]])
    got = interpret(p, inputs)["dE"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    bufs = emulate_buffers(p, inputs, {"t": t, "v": v, "m": m})
    np.testing.assert_allclose(bufs["dE"].astype(np.float64), want, rtol=2e-3, atol=2e-3)
    assert not np.any(bufs["%scatter_k0"])       # cleared for the next launch
    from ..fuzz.injection import token_problems
    assert token_problems(render(lower(p))) == []


# tied embeddings: the table is read by the lookup and by the output projection, so its
# gradient adds the lookup's masked sum to a product
TIED = """axis t, v, m
in E[v m]: f16
in tok[t]: i32
X[t m] = E[tok[t] m]
Z[t v] = X * E
out Z: f16
"""


@functools.lru_cache(maxsize=1)
def _tied_plan():
    return plan(napkin.grad(napkin.load(TIED)), "h100", {"t": 2048, "v": 32000, "m": 4096})


def test_tied_embeddings_gradient_names_the_lookups_sum_and_scatters_it():
    """Added inline to the product's term (`dE = g0 + sum[t](where(tok == v, dX, 0))`), the
    masked sum was planned densely in dE's kernel, every (v, m) reading every t (22 ms of 24.4
    at t=2048 v=32000 m=4096, model, h100); named, its kernel stores the sum alone, a
    scatter-add (3.13 ms)."""
    g = napkin.grad(napkin.load(TIED))
    lines = g.source.text.splitlines()
    (summed,) = [ln for ln in lines if "sum[t](where((tok == v)" in ln]
    assert summed.split("[")[0] != "dE" and "dE[v m] = " in g.source.text
    p = _tied_plan()
    engines = [kp.schedule.engine for kp in p.kernels]
    assert engines.count(SCATTER) == 1, engines
    assert sum(kp.cost.time for kp in p.kernels) < 5e-3       # 24.4 ms with the sum inlined


@pytest.mark.parametrize("t,v,m", [(37, 11, 9), (300, 7, 33)])
def test_tied_embeddings_gradient_on_the_emulator_against_float64(t, v, m):
    g = napkin.grad(napkin.load(TIED))
    shape = {"t": t, "v": v, "m": m}
    p = _tied_plan()        # the plan at scale (its kernels take the sizes), run at odd ones
    assert SCATTER in [kp.schedule.engine for kp in p.kernels]
    rng = np.random.default_rng(3)
    E = rng.standard_normal((v, m)).astype(np.float16)
    tok = rng.integers(0, v, t).astype(np.int32)
    tok[: t // 3] = 2                                  # duplicates: a frequent token
    dZ = rng.standard_normal((t, v)).astype(np.float16)
    inputs = {"E": E, "tok": tok, "dZ": dZ}
    E64, dZ64 = E.astype(np.float64), dZ.astype(np.float64)
    want = dZ64.T @ E64[tok]                           # the projection's term
    np.add.at(want, tok, dZ64 @ E64)                   # the lookup's: a scatter-add
    np.testing.assert_allclose(_oracle(g, inputs)["dE"], want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(interpret(p, inputs)["dE"], want, rtol=1e-9, atol=1e-9)
    got = emulate_buffers(p, inputs, shape)["dE"].astype(np.float64)
    scale = np.abs(want).max()
    assert scale > 10 and np.abs(got - want).max() <= 4e-3 * scale


def test_extra_factors_a_guard_and_a_value_read_at_the_matched_row():
    d = napkin.load(FACTORS)
    t, v, m = 45, 13, 17
    rng = np.random.default_rng(3)
    inputs = {"tok": _tokens(rng, t, v), "W": rng.standard_normal(t).astype(np.float32),
              "dX": rng.standard_normal((t, m)).astype(np.float32),
              "B": rng.standard_normal((v, m)).astype(np.float32)}
    p = _scattered(d, {"t": t, "v": v, "m": m})
    site = p.kernels[0].schedule.scatter
    assert len(site.factors) == 2 and len(site.guards) == 1     # dX * B (B at v), and W
    assert any("v" in ir.type_of(p.graph, f).axes for f in site.factors)
    want = _oracle(d, inputs)["dE"]
    np.testing.assert_allclose(interpret(p, inputs)["dE"], want, rtol=1e-12, atol=1e-12)
    bufs = emulate_buffers(p, inputs, {"t": t, "v": v, "m": m})
    np.testing.assert_allclose(bufs["dE"], want, rtol=1e-4, atol=1e-4)


SEEDED = {
    # the row one past the index's
    "wrong row": lambda s: s.replace("atomicAdd(&p3[((long long)(ix0))",
                                     "atomicAdd(&p3[((long long)((ix0 + 1) % n1))"),
    # negative indices read as rows counted from the end (Python's rule, not the where's)
    "negative rows": lambda s: s.replace("(ix0 >= 0 && ", "((ix0 = (ix0 < 0 ? ix0 + n1 : ix0)) "
                                         ">= 0 && ").replace("const long long ix0", "long long ix0"),
}


@pytest.mark.parametrize("bug", sorted(SEEDED))
def test_a_seeded_bug_in_the_scatter_is_caught(bug):
    from napkin.pipeline import run_plan
    g = napkin.grad("embedding")
    t, v, m = 37, 11, 9
    p = _scattered(g, {"t": t, "v": v, "m": m})
    inputs = _embedding(t, v, m)
    want = _oracle(g, inputs)["dE"]
    got = run_plan(p, inputs, {"t": t, "v": v, "m": m}, edit=SEEDED[bug])["dE"]
    assert not np.allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)


def test_the_scratch_is_zero_before_and_after_every_launch():
    """Two launches in a row give the same sums (the conversion clears the scratch); without
    the clearing the second doubles them, and a scratch the launchers do not zero is NaN."""
    from dataclasses import replace
    g = napkin.grad("embedding")
    t, v, m = 37, 11, 9
    sizes = {"t": t, "v": v, "m": m}
    p = _scattered(g, sizes)
    inputs = _embedding(t, v, m)
    want = _oracle(g, inputs)["dE"]

    def twice(edit=None, times=2, program=None):
        return emulate_buffers(p, inputs, sizes, edit=edit, grid=4, times=times,
                               program=program)["dE"].astype(np.float64)
    np.testing.assert_allclose(twice(), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(twice(lambda s: s.replace("p3[ix0] = 0.0f;", "")), 2 * want,
                               rtol=4e-3, atol=4e-3)
    assert np.isnan(twice(times=1, program=replace(lower(p), zeroed=()))[2]).all()


def _paged():
    """paged_attention's gradient planned at a size where the model scatters dKc and dVc (a
    kernel each), its inputs at a small size: a shared cache page, a short sequence."""
    from napkin.commands.run import random_inputs
    d = napkin.grad(napkin.load("paged_attention", x=64, j=4))
    p = plan(d, "h100", {"b": 8, "g": 8, "r": 4, "q": 1, "n": 4096})
    assert sum(kp.schedule.engine == SCATTER for kp in p.kernels) == 2
    shape = {"b": 2, "g": 2, "r": 2, "q": 1, "n": 7}
    inputs = random_inputs(d, shape, seed=5)
    rng = np.random.default_rng(5)
    inputs["pages"] = rng.integers(0, 7, (2, 4)).astype(np.int32)
    inputs["pages"][0, :2] = 3                     # two pages of one sequence share a cache page
    inputs["len"] = np.array([50, 64], dtype=np.int32)
    return d, p, shape, inputs, _oracle(d, inputs)


@pytest.mark.thorough      # (24 s of the default run's CPU)
def test_paged_attention_gradient_with_scattered_caches_on_the_interpreter():
    d, p, shape, inputs, want = _paged()
    got = interpret(p, inputs)
    for name in ("dKc", "dVc"):
        assert np.abs(want[name][3]).max() > 0.1          # the shared page's gradient
        np.testing.assert_allclose(got[name], want[name], rtol=1e-9, atol=1e-9)


@pytest.mark.thorough
def test_paged_attention_gradient_with_scattered_caches_on_the_emulator():
    from napkin.pipeline import run_plan
    d, p, shape, inputs, want = _paged()
    out = run_plan(p, inputs, shape)
    for name in ("dKc", "dVc"):
        np.testing.assert_allclose(out[name].astype(np.float64), want[name], rtol=2e-2, atol=2e-2)


def test_a_scatter_is_refused_where_the_kernel_is_not_one():
    from napkin.diagrams.diagnostics import NapkinError
    p = plan(napkin.load("softmax"), "h100")
    with pytest.raises(NapkinError) as exc:
        with_choices(p, [Choice(scatter=True)] * len(p.kernels))
    assert exc.value.diagnostics[0].code == "N0604"


def test_a_histogram_scatters_a_constant_and_few_rows_stay_dense():
    """`sum[t](where(tok == v, 1, 0))`: a value with no axes of its own, run forced; with 7
    rows for 4M positions the atomics queue at each address (the model's serial term): the
    dense sum stays."""
    text = "axis t, v = {}\nin tok[t]: i32\nC[v] = sum[t](where(tok == v, 1, 0))\nout C: f32\n"
    d = napkin.load(text.format(7))
    assert plan(d, "h100", {"t": 1 << 22}).kernels[0].schedule.engine != SCATTER
    wide = napkin.load(text.format(70000))
    assert plan(wide, "h100", {"t": 1 << 22}).kernels[0].schedule.engine == SCATTER
    p = with_choices(plan(d, "h100", {"t": 101}), [Choice(scatter=True)])
    tok = _tokens(np.random.default_rng(1), 101, 7)
    want = _oracle(d, {"tok": tok})["C"]
    assert want[2] >= 33
    np.testing.assert_array_equal(interpret(p, {"tok": tok})["C"], want)
    np.testing.assert_array_equal(emulate_buffers(p, {"tok": tok}, {"t": 101})["C"], want)
