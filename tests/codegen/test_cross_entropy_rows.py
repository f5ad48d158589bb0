"""Cross-entropy's row reductions (the brief's `logsumexp[v](L) - L[t lab[t]]`): emulated
against a float64 oracle at odd sizes, split and not; the logsumexp of a whole row one pass
(codegen/scalar._lse) and the model's H counting exactly the passes the kernel makes; lanes
over other rows priced above lanes along the row (compiler/lsu.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy

import napkin
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import Source
from napkin.explain import report
from napkin.pipeline import lowered, run_plan

from ..runtime.close import assert_close

CE = ("axis t, v\nin L[t v]: f16\nin lab[t]: i32\n"
      "loss[t] = logsumexp[v](L) - L[t lab[t]]\nout loss: f32\n")
LSE = "axis r, c\nin X[r c]: f16\nY[r] = logsumexp[c](X)\nout Y: f32\n"


def _oracle(L, lab):
    x = L.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]
    return lse - x[np.arange(len(lab)), np.clip(lab, 0, x.shape[1] - 1)]


CASES = [(3, 1001, 4), (17, 33, None), (17, 1, None)]
THOROUGH = [(3, 1, None), (3, 33, 2), (17, 1001, None), (17, 1033, 8), (3, 4097, None)]


@pytest.mark.parametrize("t, v, split", CASES + [
    pytest.param(*c, marks=pytest.mark.thorough) for c in THOROUGH])
def test_cross_entropy_matches_a_float64_oracle(t, v, split):
    rng = np.random.default_rng(t * 1000 + v)
    L = (rng.standard_normal((t, v)) * 3).astype(np.float16)
    lab = rng.integers(0, v, t).astype(np.int32)
    d = napkin.load(Source("<ce>", CE))
    p = plan(d, "h100", {"t": t, "v": v}, {"split": {"v": split or 1}})   # (1: no split)
    assert (p.split is not None) == bool(split)
    out = run_plan(p, {"L": L, "lab": lab}, p.sizes)
    assert_close(out["loss"], _oracle(L, lab), "f32", slack=64)


def _loops_over(text: str, kernel: str, size: str) -> int:
    """The loops of `kernel`'s CUDA whose bound is `size` (the streamed axis's)."""
    body = text[text.index(kernel + "("):]
    body = body[:body.find("\n}\n")]
    return len(re.findall(r"for \(int j\d+ = [^;]+; j\d+ < \(\(int\)\(" + size + r"\)\)", body))


@pytest.mark.parametrize("src, shape, split", [
    (CE, {"t": 64, "v": 100000}, {"v": 8}),     # k0 walks s_v whole (at t=8192 it streams it)
    (LSE, {"r": 64, "c": 100000}, {"c": 8})])
def test_the_model_charges_each_pass_the_partial_kernel_makes(src, shape, split):
    d = napkin.load(Source("<rows>", src))
    p = plan(d, "h100", shape, {"split": split})
    kp = p.kernels[0]
    axis = next(iter(split))
    share = f"s_{axis}"
    assert kp.schedule.stream is None        # the share is walked whole, read from global
    _, text = lowered(p)
    # the share's size is the third size parameter of the partial kernel (n2: t, v, s_v)
    sizes = re.search(r"napkin_k0\(([^)]*)\)", text, re.S).group(1)
    n = [x.strip().split()[-1] for x in sizes.split(",") if "long long" in x][2]
    loops = _loops_over(text, "napkin_k0", n)
    H = sympy.sympify(report(p, compare=False)["kernels"][0]["levels"][0]["H_values_symbolic"])
    symbols = {s.name: s for s in H.free_symbols}
    passes = sympy.Poly(sympy.expand(H), symbols[share]).coeff_monomial(symbols[share])
    rows = sympy.expand(passes / symbols[f"p_{axis}"])
    points = int(np.prod([n for _, n in kp.choice.thread]))   # rows a thread walks, each once
    assert rows.free_symbols and sympy.Poly(rows).LC() * points == loops, (H, loops, points)
    assert loops == points      # one pass a row: the running max and sum in one loop


def test_lanes_over_other_rows_cost_more_than_lanes_along_the_row():
    """The partial kernel's direct reads of L's window: 32 lanes each on its own row take 32
    L1 wavefronts a request (one a value), 32 lanes along the row one for 32 f16 values; the
    kernel's cost carries the bound, and the planner's plan puts its lanes along the row."""
    from dataclasses import replace

    from napkin.compiler import lsu
    from napkin.compiler.choices import Choices
    d = napkin.load(Source("<ce>", CE))
    p = plan(d, "h100", {"t": 8192, "v": 128000}, {"split": {"v": 16}})
    kp = p.kernels[0]
    (window,) = [a for a in kp.model.arrays if a.unstaged]
    assert window.axes[-1] == "s_v"
    rows = Choices.of(replace(kp.choice, split=None, thread=(("t", 1),)))
    along = Choices.of(replace(kp.choice, split=("s_v", 32), thread=(("t", 1),)))
    level1 = {"t": 32, "p_v": 1, "s_v": 8000, "v": 128000}
    assert float(lsu.wavefronts_per_value(window, kp.model, rows, level1)) == 1.0
    assert float(lsu.wavefronts_per_value(window, kp.model, along, level1)) == 1 / 32
    reads = [(window, 2.0 * 8192 * 128000)]
    slow = lsu.seconds(kp.model, rows, level1, reads, p.target)
    fast = lsu.seconds(kp.model, along, level1, reads, p.target)
    assert slow == 32 * fast > 0
    assert kp.choice.split is not None and kp.choice.split[0] == "s_v"
    assert dict(kp.cost.compute_parts)["L1 wavefronts"] < kp.cost.time


def test_a_value_two_selects_read_is_loaded_once_a_point():
    """codegen/kernel.load: in a chunk of several points a thread, a value read from global
    memory where used is named once a point (its index clamped: read unconditionally), not
    inlined into each select reading it. cross_entropy split over v (`Z[t (p_v s_v)]`, the
    positions past v masked `where(v < size(v), Z, -inf)`, the label's `where(v == label, Z,
    0)`) was two predicated LDG a value, one a select (SASS, static, sm_90, h100 plan at
    t = 4096, v = 50257: the chunk loop's 594 instructions held 32 LDG for 16 points, which
    the estimate read as 2 trips unrolled: SASS/model 0.61; now 546 and 16, 1.12). Here 2 x 4
    points a thread at t = 70, v = 1001 (a split of 4): 8 loads named, each read by both
    selects, and the loss emulated against the float64 oracle."""
    from napkin.compiler.cost import Choice
    from napkin.compiler.variants import with_choices
    p = plan(napkin.load("cross_entropy"), "h100", {"t": 70, "v": 1001}, {"split": {"v": 4}})
    chunked = Choice(group=(("p_v", 2), ("t", 16)), stream=("s_v", 64),
                     thread=(("p_v", 2), ("t", 4)), split=("s_v", 4))
    p = with_choices(p, [chunked] + [k.choice for k in p.kernels[1:]])
    _, text = lowered(p)
    body = text[text.index("napkin_k0("):]
    body = body[:body.find("\n}\n")]
    names = re.findall(r"const float (ld\d+) = ", body)
    assert len(names) == 8
    assert all(len(re.findall(rf"\b{n}\b", body)) >= 3 for n in names)   # (its two selects)
    rng = np.random.default_rng(70)
    Z = (rng.standard_normal((70, 1001)) * 3).astype(np.float16)
    label = rng.integers(0, 1001, 70).astype(np.int32)
    out = run_plan(p, {"Z": Z, "label": label}, p.sizes)
    assert_close(out["L"], _oracle(Z, label), "f16", slack=64)
