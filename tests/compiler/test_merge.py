"""Merged axes (compiler/merge.py): axes that always travel together become one axis, a reshape
decided once in the canonical IR; every backend that runs the plan agrees with the float64
reference, which runs the diagram as written."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.canonical import canonicalize
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT

from ..runtime import close

OPROJ = "axis t, h, d, m\nin O[t h d]: {dt}\nin W[h d m]: {dt}\nY[t m] = O * W\nout Y: f32\n"
CASES = {
    "output projection": (OPROJ.format(dt="f16"), dict(t=17, h=3, d=33, m=17), "(h*d)"),
    "three contracted": ("axis i, a, b, c, j\nin A[i a b c]: f32\nin B[a b c j]: f32\n"
                         "C[i j] = A * B\nout C: f32\n", dict(i=17, a=3, b=1, c=17, j=33),
                         "(a*b*c)"),
    "mean over h w": ("axis b, c, h, w\nin X[b c h w]: f32\nY[b c] = mean[h w](X)\nout Y: f32\n",
                      dict(b=3, c=17, h=17, w=33), "(h*w)"),
    "softmax over y z": ("axis q, y, z, d, e\nin Q[q d]: f16\nin K[y z d]: f16\n"
                         "in V[y z e]: f16\nS[q y z] = Q * K\nO[q e] = softmax[y z](S) * V\n"
                         "out O: f32\n", dict(q=33, y=3, z=17, d=17, e=33), "(y*z)"),
    "free rows": ("axis b, t, k, m\nin X[b t k]: f16\nin W[k m]: f16\nY[b t m] = X * W\n"
                  "out Y: f32\n", dict(b=17, t=3, k=33, m=17), None),
}
# (the free rows merge where fusion predicts it faster: checked at its sizes below)
NOT_MERGED = {
    "mask on h": "axis t, h, d, m\nin O[t h d]: f32\nin W[h d m]: f32\n"
                 "Y[t m] = where(h <= t, O, 0) * W\nout Y: f32\n",
    "transposed": "axis t, h, d, m\nin O[t h d]: f32\nin W[d h m]: f32\nY[t m] = O * W\nout Y: f32\n",
    "hint on d": "axis t, h, d, m\nin O[t h d]: f32\nin W[h d m]: f32\nY[t m] = O * W\n"
                 "stream d by 16\nout Y: f32\n",
    "size of d": "axis t, h, d, m\nin O[t h d]: f32\nin W[h d m]: f32\n"
                 "Y[t m] = O * W / size(d)\nout Y: f32\n",
}


def _inputs(d, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(tuple(sizes[a] for a in s.axes)).astype(
        {"f16": np.float16, "f32": np.float32}[s.dtype]) for s in d.inputs}


def _agree(text, sizes, backends=("interpret", "emulate")):
    d = napkin.load(text)
    ins = _inputs(d, sizes)
    want = napkin.run(d, backend="reference", **ins)
    for backend in backends:
        for out, ref in zip(napkin.run(d, backend=backend, **ins), want):
            close.assert_close(out, ref, "f16" if "f16" in text else "f32", slack=16)


@pytest.mark.parametrize("case", list(CASES))
def test_merged_axes_agree_with_the_reference(case):
    text, sizes, merged = CASES[case]
    if merged is not None:
        g = canonicalize(napkin.load(text).ir, free=False)
        assert [m for m, _ in g.graph["merged"]] == [merged]
    _agree(text, sizes)


@pytest.mark.parametrize("case", list(NOT_MERGED))
def test_axes_read_otherwise_stay_and_agree(case):
    g = canonicalize(napkin.load(NOT_MERGED[case]).ir)
    assert not g.graph.get("merged")
    _agree(NOT_MERGED[case], dict(t=17, h=3, d=33, m=17))


def test_static_and_empty_sizes():
    static = "axis t, m\naxis h = 3, d = 17\n" + OPROJ.split("\n", 1)[1].replace(
        "{dt}", "f32")
    d = napkin.load(static)
    g = plan(d, "h100").graph
    assert g.graph["axes"]["(h*d)"].size == 51
    _agree(static, dict(t=33, h=3, d=17, m=16))
    text = OPROJ.format(dt="f32")
    _agree(text, dict(t=5, h=0, d=3, m=7))       # an empty sum is 0
    d = napkin.load(text)
    ins = _inputs(d, dict(t=0, h=2, d=3, m=7))
    for backend in ("reference", "interpret", "emulate"):
        assert napkin.run(d, backend=backend, **ins)[0].shape == (0, 7)


def test_free_rows_merge_where_predicted_faster():
    d = napkin.load(CASES["free rows"][0])
    small = plan(d, "h100", dict(b=64, t=3, k=4096, m=4096))
    assert [m for m, _ in small.graph.graph["merged"]] == ["(b*t)"]
    held = plan(d, "h100", dict(b=4, t=4096, k=4096, m=4096))   # a tie: the user's axes
    assert not held.graph.graph.get("merged")
    # attention's batch axes b h merged gain well under merge.MARGIN (model): the user's stay
    att = plan(napkin.load("attention", d=64), "h100", dict(b=1, h=2, q=67, x=67),
               engine="cuda-cores")      # (merged at a margin of 1e-9: 6.375 us vs 6.390)
    assert not att.graph.graph.get("merged") and "b" in att.kernels[0].schedule.block_tile()


def test_output_projection_is_one_tensor_core_matmul_on_h100():
    shape = dict(t=4096, h=32, d=128, m=4096)
    p = plan(napkin.load(OPROJ.format(dt="f16")), "h100", shape)
    mm = plan(napkin.load("axis t, k, m\nin A[t k]: f16\nin B[k m]: f16\nY[t m] = A * B\n"
                          "out Y: f32\n"), "h100", dict(t=4096, k=4096, m=4096))
    assert len(p.kernels) == 1 and p.kernels[0].schedule.engine == PRODUCT
    assert mm.kernels[0].schedule.engine == PRODUCT
    assert abs(p.time / mm.time - 1) < 0.1


def test_explain_says_what_was_merged():
    from napkin.explain import render_text, report
    text = render_text(report(plan(napkin.load(OPROJ.format(dt="f16")), "h100",
                             dict(t=4096, h=32, d=128, m=4096)), compare=False))
    assert "axes h d merged into one (h*d) = 4096: adjacent in every array" in text


def test_merged_names_are_one_part_of_packed_rows():
    # packing.py's packed rows `(r q)` and a merged axis `(h*d)` (no space) never read alike
    from napkin.compiler import merge, packing
    hd = merge.name(("h", "d"))
    assert hd == "(h*d)" and packing.parts(hd) == (hd,)
    assert packing.parts(packing.name(("r", "q"))) == ("r", "q")
    rows = packing.name((hd, "q"))
    assert packing.parts(rows) == (hd, "q") and packing.position(("t", hd, "q"), rows) == 2
    assert packing.position(("t", hd, "m"), hd) == 1


def test_attention_rows_are_left_to_packing():
    # GQA's query rows r q: packed by packing.py in the lowering (also under a causal mask and
    # in a split decode), not merged; its batch axes b g still merge
    d = napkin.load("gqa_attention", d=128)
    g = canonicalize(d.ir, free=True)
    assert [m for m, _ in g.graph["merged"]] == ["(b*g)"]
    p = plan(d, "h200", {"b": 1, "g": 8, "r": 8, "q": 2, "x": 32768})
    sites = [kp.schedule.site for kp in p.kernels if kp.schedule.engine == "attention"]
    assert len(sites) == 1 and sites[0].packed == ("r", "q") and sites[0].row == "(r q)"
