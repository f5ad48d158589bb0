"""Dynamic head axes planned fixed at the planning shape's size (compiler/specialise.py).

An attention whose head axis `d` is dynamic plans FlashAttention at a given head size (the
plan records `specialised`, with the dynamic plan's time), not at a defaulted one nor above
specialise.MAX_SIZE; the CLI's plan, explain and the CUDA header say
it; the candidates are the axes of products that feed products; the runtime refuses a
specialised program at another size. A head the fragments do not take whole (d = 24, 40) is
padded in shared memory (compiler/headpad.py) and specialised as any other. The runs against float64 are
tests/runtime/test_specialise_runs.py.
"""

from __future__ import annotations

import pytest

import napkin
from napkin import pipeline
from napkin.compiler import headpad, specialise
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.explain import render_text, report
from napkin.pipeline import Options
from napkin.runtime.launches import make_launches

DYNAMIC = """axis b, h, q, x, d
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = Q * K / sqrt(size(d))
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
out O: f16
"""
SMALL = {"b": 1, "h": 2, "q": 37, "x": 45}
BIG = {"b": 4, "h": 16, "q": 4096, "x": 4096}


def _engines(p):
    return [kp.schedule.engine for kp in p.kernels]


def test_a_dynamic_head_plans_flash_attention_at_the_planning_shape():
    d = napkin.load(DYNAMIC)
    p = plan(d, "h100", {**BIG, "d": 64})
    assert p.specialised == {"d": 64} and _engines(p) == [ATTENTION]
    assert p.diagram.axes["d"] == 64 and d.axes["d"] is None     # (the caller's stays dynamic)
    # as fast as the diagram with the head fixed, and faster than the dynamic plan
    fixed = plan(napkin.load(DYNAMIC.replace("x, d\n", "x\naxis d = 64\n")), "h100", BIG)
    assert p.time == pytest.approx(fixed.time) and p.unspecialised > 3 * p.time
    # the driver's plan (napkin explain / compile / Kernel) is the same decision
    q = pipeline.plan(d, Options.make(target="h100", shape={**BIG, "d": 64}))
    assert q.specialised == {"d": 64} and _engines(q) == [ATTENTION]


@pytest.mark.parametrize("head, padded", [(16, 16), (32, 32), (24, 32), (40, 48)])
def test_small_odd_shapes_specialise_each_head_size(head, padded):
    p = plan(napkin.load(DYNAMIC), "h100", {**SMALL, "d": head})
    assert p.specialised == {"d": head} and _engines(p) == [ATTENTION]
    site = p.kernels[0].schedule.site
    assert site.head == head and headpad.head_tile(site) == padded     # (headpad.py: Q K's k)


def test_no_specialisation_where_it_buys_nothing_or_the_size_is_no_callers():
    d = napkin.load(DYNAMIC)
    wide = specialise.MAX_SIZE + 8                  # wider than a block holds a head
    assert specialise.candidates(plan(d, "h100", {**SMALL, "d": wide})) == {}
    defaulted = plan(d, "h100", BIG)                # d at the planning default: no caller's
    assert defaulted.specialised == {} and "d" in defaulted.defaulted
    reasons = " ".join(kp.kernel.reason for kp in defaulted.kernels)
    assert "or plan for the size (--shape d=64: specialised)" in reasons, reasons
    static = plan(napkin.load("attention"), "h100", BIG)
    assert static.specialised == {} and _engines(static) == [ATTENTION]


def test_candidates_are_the_axes_of_products_feeding_products():
    attention = napkin.load(DYNAMIC)
    assert specialise.chained_axes(attention.ir) == {"d": 16}
    two = napkin.load(DYNAMIC.replace("x, d", "x, d, e").replace("V[b h x d]", "V[b h x e]")
                      .replace("O[b h q d]", "O[b h q e]"))
    assert specialise.chained_axes(two.ir) == {"d": 16, "e": 8}
    mlp = napkin.load("axis t, m, f, o\nin X[t m]: f16\nin W1[m f]: f16\nin W2[f o]: f16\n"
                      "Y[t o] = gelu(X * W1) * W2\nout Y: f16")
    assert specialise.chained_axes(mlp.ir) == {"m": 16, "o": 8}
    matmul = napkin.load("matmul")
    assert specialise.chained_axes(matmul.ir) == {}
    # planned at d = 24, e = 36 (padded to 32 and 40 in shared memory: headpad.py): both
    sizes = {**SMALL, "d": 24, "e": 36}
    assert specialise.candidates_of(two, sizes, ()) == {"d": 24, "e": 36}
    p = plan(two, "h100", sizes)    # (since the small-shape counts of 2026-12-07, taken)
    assert p.specialised in ({}, {"d": 24, "e": 36}), p.specialised
    both = plan(two, "h100", {**SMALL, "d": 32, "e": 16})     # FlashAttention with dk != dv
    assert both.specialised == {"d": 32, "e": 16} and _engines(both) == [ATTENTION]


def test_explain_and_the_cuda_header_say_the_specialisation():
    d = napkin.load(DYNAMIC)
    options = Options.make(target="h100", shape={**BIG, "d": 64})
    p, _, source = pipeline.source(d, options)
    text = render_text(report(p))
    assert "d specialised at 64 (dynamic in the diagram: each size compiles its own kernel; " \
        "predicted" in text, text
    assert report(p)["dynamic"] == ["b", "h", "q", "x", "d"]
    assert "// Specialised: dynamic axes of the diagram fixed at 64 " in source
    _, _, plain = pipeline.source(d, Options.make(target="h100", shape=SMALL))   # (defaulted)
    assert "Specialised" not in plain
    assert "specialised" not in render_text(report(plan(d, "h100", SMALL)))


def test_a_specialised_program_refuses_other_sizes():
    d = napkin.load(DYNAMIC)
    _, program, _ = pipeline.source(d, Options.make(target="h100", shape={**SMALL, "d": 32}))
    assert program.specialised == (("d", 32),)
    assert make_launches(program, {**SMALL, "d": 32})
    with pytest.raises(napkin.NapkinError, match="N0308") as err:
        make_launches(program, {**SMALL, "d": 16})
    assert "specialised for d = 32 and is called with d = 16" in str(err.value)


@pytest.mark.thorough
def test_gradients_specialise_through_the_same_path():
    shape = {**BIG, "d": 64}
    p = plan(napkin.grad(DYNAMIC), "h100", shape)
    fixed = plan(napkin.grad("attention"), "h100", shape)
    assert p.specialised == {"d": 64} and _engines(p) == _engines(fixed)
    assert p.time == pytest.approx(fixed.time) and p.unspecialised > p.time


def test_the_dynamic_plan_stands_unless_the_fixed_one_is_predicted_faster(monkeypatch):
    from napkin.compiler.plan import fuse_kernels, prepare, tile
    d, shape = napkin.load(DYNAMIC), {**SMALL, "d": 32}
    dynamic = tile(fuse_kernels(prepare(d, "h100", shape)))
    assert dynamic.specialised == {} and specialise.candidates(dynamic) == {"d": 32}

    def fixed_plan(fixed):
        return tile(fuse_kernels(prepare(fixed, "h100", shape)))

    def on_cuda_cores(fixed):
        return tile(fuse_kernels(prepare(fixed, "h100", shape), "cuda-cores"))
    faster = fixed_plan(napkin.load(d, d=32))
    assert faster.time < dynamic.time * (1 - specialise.MARGIN)
    assert specialise.decide(dynamic, fixed_plan).specialised == {"d": 32}
    # predicted faster by less than MARGIN: the dynamic plan stands (the CUDA-core plan with d
    # fixed was once such a plan; since its stores are counted on every lane of its split,
    # issue_pair.beside, it is faster, but holds no head static: nothing to specialise)
    monkeypatch.setattr(specialise, "MARGIN", 1 - faster.time / dynamic.time + 0.01)
    assert specialise.decide(dynamic, fixed_plan) is dynamic
    assert specialise.decide(dynamic, on_cuda_cores) is dynamic


PROJECTED = """axis b, t, s, m, h, d
in Q[b h t d]: f16, K[b h s d]: f16, V[b h s d]: f16, Wo[h d m]: f16
S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)
A[b t h d] = softmax[s](S) * V
R[b t m] = A * Wo
out R: f16
"""


def test_only_the_axes_the_tensor_core_kernels_hold_whole_are_specialised():
    """Projected attention: R = A * Wo keeps `m` from the product over s, but a lowering of
    the two would hold s whole too, which stays dynamic (2048): m is no candidate (it was, and
    the diagram was planned again with m fixed for nothing) and R's kernel is a plain product
    (it tiles m); only d is fixed, so each m does not compile its own kernel, and the plan is
    as fast as with both fixed."""
    d = napkin.load(PROJECTED)
    shape = {"b": 1, "t": 2048, "s": 2048, "m": 256, "h": 8, "d": 64}
    assert specialise.candidates_of(d, shape, ()) == {"d": 64}
    # with s within a head's reach, the pair (s, m) is one a chain could hold: m is a candidate
    assert specialise.candidates_of(d, {**shape, "s": 256}, ()) == {"d": 64, "m": 256, "s": 256}
    p = plan(d, "h100", shape)
    assert p.specialised == {"d": 64} and p.diagram.axes["m"] is None
    assert _engines(p)[0] == ATTENTION and specialise.held(p) == {"d"}
    both = plan(napkin.load(PROJECTED, d=64, m=256), "h100", shape)
    assert p.time == pytest.approx(both.time)


@pytest.mark.parametrize("text, hint", [
    (DYNAMIC, "`--stream d=16`"), (DYNAMIC + "stream d by 16\n", "`stream d by 16`")])
def test_explain_names_a_stream_hint_that_keeps_flash_attention_off(text, hint):
    """Streaming the head (a hint, on the command line or in the diagram) keeps the kernel
    off FlashAttention, which streams the keys, whatever the head's size: explain names the
    hint, not the dynamic head (whose size --shape gave: nothing to specialise for)."""
    overrides = {"stream": {"d": 16}} if "stream d" not in text else None
    p = plan(napkin.load(text), "h100", {**BIG, "d": 64}, overrides)
    assert p.specialised == {} and ATTENTION not in _engines(p)
    text = render_text(report(p))
    assert f"not FlashAttention with the kernels around it: the hint {hint} streams `d`, " \
        "FlashAttention streams `x` (drop the hint)" in text, text
    assert "plan for the size" not in text


def test_a_specialised_plan_refused_for_the_users_merge_says_so():
    """`--engine tensor-cores --merge last-block` with the head dynamic and given (d = 72):
    only the plan with d fixed runs on tensor cores, and its merge cannot run in the tail.
    The error said N0606 at the diagram's softmax (the dynamic plan's scores stored), which
    was not why; it is that plan's N0607 (as with -D d=72), and engine auto still plans."""
    d = napkin.load(DYNAMIC)
    shape = {"b": 1, "h": 2, "q": 17, "x": 301, "d": 72}
    with pytest.raises(napkin.NapkinError) as exc:
        plan(d, "h100", shape, {"split": {"x": 3}}, engine="tensor-cores", merge="last-block")
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0607" and "cannot merge in the last block" in diag.message
    fixed = napkin.load(DYNAMIC.replace("x, d\n", "x\naxis d = 72\n"))
    with pytest.raises(napkin.NapkinError) as same:
        plan(fixed, "h100", shape, {"split": {"x": 3}}, engine="tensor-cores",
             merge="last-block")
    assert same.value.diagnostics[0].message == diag.message
    p = plan(d, "h100", shape, {"split": {"x": 3}}, merge="last-block")
    assert p.tail is not None and not p.specialised
    # engine auto keeps d dynamic there (S stored, no FlashAttention): explain says why
    from napkin.explain import specialised_lines
    assert specialised_lines({"specialise_refused": p.refused}, str) == [
        f"d kept dynamic: planned with d = 72 fixed, {diag.message} [N0607]"]


def test_self_attentions_gradient_at_512_is_not_planned_again_for_its_sequence_axis():
    """Self-attention's gradient at t = s = 512 (within MAX_SIZE): `s` is contracted by products
    that feed products (dQ = dS * K, read by dQ * Wq), but every such pair also holds `m`
    (1024, dynamic) or is fed by the projections over it, so no lowering holds s whole and s
    is no candidate: the diagram was planned a second time with s fixed, for the same plan
    (planning 21 -> 9.6 CPU-s; the plans of t = 128, 512 and 2048 identical). With m
    within reach, the pairs over s and m are candidates again."""
    from .self_attention import VARIANTS
    d = napkin.grad(napkin.load(VARIANTS["causal_proj"]))
    assert "s" in specialise.chained_axes(d.ir)
    shape = {"t": 512, "s": 512, "m": 1024, "h": 8}
    assert specialise.candidates_of(d, shape, ()) == {}
    # (read off the canonical IR: K = X * Wk stored as read, `[h s d]`, is the product over
    # m feeding S = Q * K that keeps `t` there, its own name: t too, held by no plan here)
    assert specialise.candidates_of(d, {**shape, "m": 256}, ()) == {"m": 256, "s": 512,
                                                                     "t": 512}
