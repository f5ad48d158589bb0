"""Tensor-core kernels (mma.sync m16n8k16 from codegen/mma.py), run by the CPU emulator.

Plans are made at large planning sizes, where the planner puts matrix products on
the tensor cores, and the kernels then run at odd sizes next to tile multiples (a
kernel's sizes are runtime parameters): every tail of a block tile, a warp tile, a
fragment and a chunk is exercised. Results are compared with the float64 reference
under testing.md's tolerance rule; the warp layouts and operand layouts a plan can
take are run one by one, and seeded fragment bugs must be caught.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np
import pytest

from ..sampling import sampled

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler import stored16
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices, with_stages
from napkin.runtime import compare, reference
from napkin.pipeline import run_plan
from napkin.runtime.interpret import interpret
from napkin.diagrams.diagnostics import Source
from napkin.diagrams.sources import library_source

from .conftest import library, shape_of

BIG = 2048


_PLANS: dict = {}


def _memo(kind: str, d, args: tuple, make):
    """A plan these tests (and the codegen tests importing these helpers) read and never
    change, made once per process for a diagram's text and sizes and the other arguments."""
    key = (kind, d.source.name, d.source.text, d.overrides, repr(args))
    if key not in _PLANS:
        _PLANS[key] = make()
    return _PLANS[key]


def tc_plan(d, target="h100", **kw):
    """The plan at large sizes (eligible products on tensor cores)."""
    return _memo("tc", d, (target, sorted(kw.items())), lambda: plan(
        d, target, {a: BIG for a, s in d.axes.items() if s is None}, **kw))


def verdicts(d, p, shape, seed=0, source_edit=None):
    inputs = random_inputs(d, shape, seed)
    out = run_plan(p, inputs, shape, timeout_s=240, edit=source_edit)
    return list(compare.against_reference(d, inputs, out, plan=p).values())


def assert_close(d, p, shape, seed=0):
    for v in verdicts(d, p, shape, seed):
        assert v.ok, v.message


def on_tensor_cores(p) -> list:
    return [kp for kp in p.kernels if kp.choice.warps]


def in_turn(cases) -> list[tuple]:
    """(case, dtype): each case once, f16 and bf16 in turn. The two dtypes take the same
    lowering (the kernels differ in the storage type, the packing and the mma instruction's
    type, which every bf16 and every f16 case runs), so each case need not run in both."""
    return [(c, ("f16", "bf16")[i % 2]) for i, c in enumerate(cases)]


@pytest.mark.parametrize("name, dtype", in_turn(["matmul", "batched_matmul", "linear_gelu", "mlp",
                                                  "swiglu"]))
def test_library_products_on_tensor_cores_match_the_reference(name, dtype):
    d = library(name, dtype)
    p = tc_plan(d)
    assert on_tensor_cores(p), [kp.choice for kp in p.kernels]
    # each product on the instruction its plan chose (h100: wgmma where the model prefers it)
    text = render(lower(p))
    for kp in on_tensor_cores(p):
        wanted = (rf"napkin_wgmma_m64n{dict(kp.choice.thread)[kp.schedule.site.col]}k16_{dtype}"
                  if kp.choice.instruction == "wgmma" else f"napkin_mma_m16n8k16_{dtype}")
        assert re.search(wanted, text), wanted
    assert_close(d, p, shape_of(d))


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (16, 16, 8), (17, 15, 9), (15, 17, 7),
                                     (129, 65, 257), (64, 48, 128), (3, 200, 5)])
def test_matmul_at_tile_edges(m, k, n):
    d = library("matmul", "f16")
    assert_close(d, tc_plan(d), {"m": m, "k": k, "n": n}, seed=m + k + n)


LAYOUTS = {
    "A[m k], B[k n]": "axis m, k, n\nin A[m k]: {t}\nin B[k n]: {t}\nC[m n] = A * B\nout C: {t}",
    "A[k m], B[k n]": "axis m, k, n\nin A[k m]: {t}\nin B[k n]: {t}\nC[m n] = A * B\nout C: {t}",
    "A[m k], B[n k]": "axis m, k, n\nin A[m k]: {t}\nin B[n k]: {t}\nC[m n] = A * B\nout C: {t}",
    "A[k m], B[n k]": "axis m, k, n\nin A[k m]: {t}\nin B[n k]: {t}\nC[m n] = A * B\nout C: {t}",
    "C[n m]": "axis m, k, n\nin A[m k]: {t}\nin B[k n]: {t}\nC[n m] = A * B\nout C: f32",
    "batch inside": ("axis b, m, k, n\nin A[m b k]: {t}\nin B[b k n]: {t}\nC[b m n] = A * B\n"
                     "out C: {t}"),
    "weight shared by the batch": ("axis b, m, k, n\nin A[b m k]: {t}\nin B[k n]: {t}\n"
                                   "C[b m n] = A * B\nout C: {t}"),
    "batch in one operand each": ("axis b, c, m, k, n\nin A[b m k]: {t}\nin B[k c n]: {t}\n"
                                  "C[b c m n] = A * B\nout C: {t}"),
    "batch between": ("axis b, m, k, n\nin A[k b m]: {t}\nin B[n b k]: {t}\nC[m b n] = A * B\n"
                      "out C: {t}"),
}


@pytest.mark.parametrize("layout, dtype", in_turn(LAYOUTS))
def test_every_operand_layout(layout, dtype):
    """Operands stored k-contiguous or not (ldmatrix plain or .trans), batch axes anywhere."""
    d = napkin.load(LAYOUTS[layout].format(t=dtype))
    p = tc_plan(d)
    assert on_tensor_cores(p)
    assert_close(d, p, {a: s for a, s in {"b": 3, "c": 2, "m": 37, "k": 41, "n": 19}.items() if a in d.axes})


def test_epilogue_with_bias_masks_and_casts():
    text = ("axis t, i, o\nin X[t i]: bf16\nin W[o i]: bf16\nin bias[o]: f32\n"
            "Y[t o] = where(t >= o, gelu(X * W + bias) * 0.5, -1.0)\n"
            "Z[o t] = sigmoid(X * W)\nout Y: bf16\nout Z: f32")
    d = napkin.load(text)
    p = tc_plan(d)
    assert on_tensor_cores(p)
    assert_close(d, p, {"t": 45, "i": 33, "o": 27})


def retiled(p, chunk: int, tiles: dict):
    """The plan with its tensor-core kernel retiled on mma.sync: `tiles` gives each fragment
    axis its (block tile, warps along it); `chunk` the streamed chunk (an h100 plan's product
    may be on wgmma: compiler/wgmma.py)."""
    (kp,) = p.kernels
    c = kp.choice
    group = {**dict(c.group), **{a: t for a, (t, _) in tiles.items()}}
    thread = {**dict(c.thread), **{a: t // w for a, (t, w) in tiles.items()}}
    choice = dataclasses.replace(c, group=tuple(sorted(group.items())),
                                 thread=tuple(sorted(thread.items())), stream=(c.stream[0], chunk),
                                 warps=tuple(sorted((a, w) for a, (_, w) in tiles.items())),
                                 instruction="mma.sync")
    return with_choices(p, [choice])


@pytest.mark.parametrize("bm, bn, bk, wm, wn", [
    (16, 8, 16, 1, 1), (32, 16, 32, 1, 2), (64, 16, 16, 2, 1), (64, 64, 64, 2, 2),
    (128, 32, 32, 4, 2), (16, 256, 16, 1, 8), (64, 128, 32, 1, 4)])
def test_every_warp_layout(bm, bn, bk, wm, wn):
    d = library("matmul", "bf16")
    p = retiled(tc_plan(d), bk, {"m": (bm, wm), "n": (bn, wn)})
    prog = lower(p)
    assert prog.kernels[0].threads == 32 * wm * wn
    assert_close(d, p, {"m": 70, "k": 83, "n": 50})


def test_interpreter_runs_tensor_core_plans():
    """The schedule interpreter reads a warp tile as the register level's unit."""
    import numpy as np
    d = library("linear_gelu", "f16")
    p = tc_plan(d)
    shape = {"t": 40, "i": 70, "o": 33}
    inputs = random_inputs(d, shape, 3)
    got = interpret(p, inputs)["Y"]
    assert np.allclose(got, reference.evaluate(d, inputs)["Y"], rtol=1e-9, atol=1e-9)


# -- seeded fragment bugs: each must give wrong values -----------------------------------------

BUGS = {
    # (every occurrence: a product over a runtime-sized axis has its chunk loop twice)
    "A fragment rows shifted": lambda s: s.replace("lane % 16) *", "(lane + 1) % 16) *"),
    "B fragment without .trans": lambda s: s.replace("napkin_ldmatrix_x2_trans(fb", "napkin_ldmatrix_x2(fb")
    .replace("napkin_ldmatrix_x4_pair_trans(", "napkin_ldmatrix_x4_pair("),
    # two B fragments by one ldmatrix.x4: lanes 16-31 address the second's rows
    "the pair's second fragment read as its first": lambda s: _pair_first(s),
    "rows g + 8 stored as g": lambda s: s.replace("+ fg + (i2 / 2) * 8", "+ fg", 1),
    "columns 2q + 1 dropped": lambda s: s.replace("fq * 2 + i2 % 2", "fq * 2", 1),
    "k halves swapped": lambda s: s.replace("(lane / 16) * 8", "(1 - lane / 16) * 8"),
    "chunk tails not zeroed": lambda s: s.replace("< nlen", "< 1073741824"),
}


def _pair_first(source: str) -> str:
    """Lanes 16-31 of the B pairs' ldmatrix.x4 address the first fragment's rows: in the
    call's address, or in the per-thread table of a swizzled tile (`sw`) it reads."""
    source = re.sub(r"(napkin_ldmatrix_x4_pair\w*\([^;]*?) \+ \(lane / 16\) \* 8\);", r"\1);",
                    source)
    for table in set(re.findall(r"napkin_ldmatrix_x4_pair\w*\([^;]*?(sw\d+)\[", source)):
        source = re.sub(rf"({table}\[\w+\] = [^;]*?) \+ \(lane / 16\) \* 8", r"\1", source)
    return source


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_fragment_bugs_give_wrong_values(bug):
    d = library("matmul", "f16")
    p = tc_plan(d, "h100:arch=sm_90")       # mma.sync's fragments (sm_90a: wgmma)
    assert not all(verdicts(d, p, {"m": 37, "k": 41, "n": 29}, source_edit=BUGS[bug]))


def test_aligned_rows_take_the_16_byte_copies():
    """Sizes that are multiples of 8 copy with cp.async: a bug there must show."""
    d = library("matmul", "f16")
    p = tc_plan(d)
    shape = {"m": 37, "k": 48, "n": 40}
    assert all(verdicts(d, p, shape))
    half = lambda s: s.replace("? 16 : 0)", "? 8 : 0)")   # noqa: E731 - copy half of each vector
    assert not all(verdicts(d, p, shape, source_edit=half))
    odd = {"m": 37, "k": 41, "n": 29}                        # the scalar path is unaffected
    assert all(verdicts(d, p, odd, source_edit=half))


# -- attention: FlashAttention-2 on tensor cores (codegen/flash.py) ---------------------------

ATTENTION_BIG = {"b": 4, "h": 16, "g": 4, "r": 4, "q": 4096, "x": 4096}


def flash_plan(d, **kw):
    def make():
        p = plan(d, "h100", {a: v for a, v in ATTENTION_BIG.items() if a in d.axes}, **kw)
        assert on_tensor_cores(p) and "napkin_pack_" in render(lower(p)), \
            [k.choice for k in p.kernels]
        return p
    return _memo("flash", d, tuple(sorted(kw.items())), make)


def with_static(d, shape):
    return {**shape, **{a: s for a, s in d.axes.items() if s is not None}}


@pytest.mark.parametrize("name, dtype", in_turn(["attention", "causal_attention", "gqa_attention",
                                                  "attention_manual"]))
def test_attention_on_tensor_cores_matches_the_reference(name, dtype):
    d = library(name, dtype)
    assert_close(d, flash_plan(d), with_static(d, shape_of(d)))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("q, x", [(1, 1), (16, 16), (17, 63), (64, 65), (5, 300), (300, 70),
                                  (40, 256)])   # 256: whole chunks only, no partial last one
def test_attention_at_tile_edges_on_tensor_cores(q, x, causal):
    d = library("causal_attention" if causal else "attention", "f16")
    assert_close(d, flash_plan(d), with_static(d, {"b": 1, "h": 2, "q": q, "x": x}), seed=q + x)


@pytest.mark.parametrize("head", [16, 32, 128])
def test_attention_head_sizes(head):
    d = library("attention", "bf16", d=head)
    assert_close(d, flash_plan(d), with_static(d, {"b": 1, "h": 2, "q": 45, "x": 70}))


FLASH_LAYOUTS = {
    "value width != head": "in Q[b q d]: {t}\nin K[b x d]: {t}\nin V[b x e]: {t}",
    "transposed K and V": "in Q[b q d]: {t}\nin K[b d x]: {t}\nin V[b e x]: {t}",
    "transposed Q": "in Q[b d q]: {t}\nin K[x b d]: {t}\nin V[x b e]: {t}",
}


@pytest.mark.parametrize("layout, dtype", in_turn(FLASH_LAYOUTS))
def test_attention_operand_layouts_and_epilogue(layout, dtype):
    """ldmatrix plain or .trans for Q, K, V; a bias and a scale after O; an f32 output."""
    text = ("axis b, q, x\naxis d = 32\naxis e = 24\n" + FLASH_LAYOUTS[layout].format(t=dtype)
            + f"\nin bias[e]: {dtype}\nS[b q x] = where(x <= q + 3, Q * K * 0.2, -inf)\n"
            "P[b q x] = softmax[x](S)\nO[b q e] = (P * V) * 2.0 + bias\nout O: f32")
    d = napkin.load(text)
    p = plan(d, "h100", {"b": 4, "q": 4096, "x": 4096})
    assert on_tensor_cores(p)
    assert_close(d, p, with_static(d, {"b": 2, "q": 41, "x": 77}))


def test_fully_masked_rows_give_zero_on_tensor_cores():
    import numpy as np
    text = ("axis b, h, q, x\naxis d = 16\nin Q[b h q d]: f16, K[b h x d]: f16, V[b h x d]: f16\n"
            "S[b h q x] = where(q >= 5 and x <= q, Q * K, -inf)\n"
            "P[b h q x] = softmax[x](S)\nO[b h q d] = P * V\nout O: f16")
    d = napkin.load(text)
    p = flash_plan(d)
    shape = with_static(d, {"b": 1, "h": 2, "q": 37, "x": 50})
    assert_close(d, p, shape)
    out = run_plan(p, random_inputs(d, shape, 5), shape)["O"]
    assert np.all(out[:, :, :5] == 0) and not np.isnan(out.astype(np.float32)).any()


@pytest.mark.parametrize("bm, wm, chunk", [(16, 1, 16), (32, 1, 32), (64, 4, 128), (128, 4, 64),
                                           (64, 2, 16)])
def test_attention_warp_layouts(bm, wm, chunk):
    d = library("causal_attention", "bf16")
    p = retiled(flash_plan(d), chunk, {"q": (bm, wm)})
    assert lower(p).kernels[0].threads == 32 * wm
    assert_close(d, p, with_static(d, {"b": 1, "h": 2, "q": 70, "x": 83}))


def test_interpreter_runs_attention_plans_on_tensor_cores():
    import numpy as np
    d = library("causal_attention", "f16")
    shape = {"b": 1, "h": 2, "q": 40, "x": 70}
    inputs = random_inputs(d, shape, 2)
    got = interpret(flash_plan(d), inputs)["O"]
    assert np.allclose(got, reference.evaluate(d, inputs)["O"], rtol=1e-9, atol=1e-9)


FLASH_BUGS = {
    "row maximum not shared across the quad": lambda s: s.replace("napkin_lanes_max(mx, 4)", "mx"),
    "row sums not added across the quad": lambda s: s.replace("napkin_lanes_sum(rl[i0][i1], 4)",
                                                              "rl[i0][i1]"),
    "output not rescaled": lambda s: s.replace("acc[i0][i2][2 * i1 + i3] * rsc[i0][i1];",
                                               "acc[i0][i2][2 * i1 + i3];"),
    "P fragments in the wrong order": lambda s: s.replace("[2 * i1 + 0][2], sc[i0][2 * i1 + 0][3]",
                                                          "[2 * i1 + 1][0], sc[i0][2 * i1 + 1][1]"),
    "keys past the end not masked": lambda s: s.replace("i2 % 2 < clen) ? ", "i2 % 2 < 1073741824) ? "),
}


@pytest.mark.parametrize("bug", list(FLASH_BUGS))
def test_seeded_attention_bugs_give_wrong_values(bug):
    d = library("attention", "f16")
    shape = with_static(d, {"b": 1, "h": 2, "q": 37, "x": 150})   # several chunks
    assert not all(verdicts(d, flash_plan(d), shape, source_edit=FLASH_BUGS[bug]))


PIPELINE_BUGS = {
    "no wait for the current chunk's copies":
        lambda s: re.sub(r"napkin_cp_async_wait<\d+>\(\);", "", s),
    "a wait that lets the current chunk's copies pend":
        lambda s: re.sub(r"napkin_cp_async_wait<(\d+)>\(\);",
                         lambda m: f"napkin_cp_async_wait<{int(m.group(1)) + 1}>();", s),
    "stages not advanced": lambda s: re.sub(r"\n\s*stage = [^;]+;", "\n", s),
    "next chunk copied into the current stage":
        lambda s: s.replace("(stage ^ 1) *", "stage *").replace("fill *", "stage *"),
}


@functools.cache
def _pipelined(name: str, stages: int):
    """(diagram, plan `stages` deep, shape, the unmodified kernel's verdicts): made once per
    process for the four seeded bugs of each (name, stages) below."""
    d = library(name, "f16")
    p = with_stages(tc_plan(d) if name == "matmul" else flash_plan(d), stages)
    # chunks enough that every stage is filled by the loop's prefetch, not only before it
    shape = {"m": 37, "k": 144, "n": 40} if name == "matmul" else \
        with_static(d, {"b": 1, "h": 2, "q": 37, "x": 520})
    return d, p, shape, verdicts(d, p, shape)


@pytest.mark.parametrize("stages", sampled([2, 3, 4]))     # (2 and 4 by default)
@pytest.mark.parametrize("name", ["matmul", "attention"])
@pytest.mark.parametrize("bug", list(PIPELINE_BUGS))
def test_seeded_pipeline_bugs_give_wrong_values(bug, name, stages):
    """`stages` deep, one barrier per chunk: chunks c + 1 to c + stages - 1 are copied
    (cp.async, 16-byte aligned sizes) while c is used."""
    d, p, shape, clean = _pipelined(name, stages)
    assert all(v.ok for v in clean), [v.message for v in clean if not v.ok]
    edit = PIPELINE_BUGS[bug]
    source = render(lower(p))
    assert edit(source) != source
    assert not all(verdicts(d, p, shape, source_edit=edit))


def test_the_model_deepens_the_pipeline_where_a_chunk_in_flight_is_too_little():
    """A chunk of matmul's 128 x 256 tiles at k-step 16 is 12 KiB; an h100 SM keeps some 18
    KiB in flight to stream at its share of the HBM bandwidth (occupancy.needed_in_flight):
    three stages, two chunks ahead. At k-step 64 one chunk ahead is enough: two."""
    from napkin.compiler import occupancy
    d = library("matmul", "f16")
    shape = {"m": 4096, "n": 4096, "k": 4096}
    for chunk, want in ((16, 3), (64, 2)):
        p = plan(d, "h100", shape, {"stream": {"k": chunk}})
        (kp,) = p.kernels
        assert (kp.choice.stream[1], kp.schedule.stages, int(kp.cost.stages)) == (chunk, want, want)
        source = render(lower(p))
        assert f"napkin_cp_async_wait<{want - 2}>();" in source
    need = max(occupancy.needed_in_flight(p.target))
    assert 12 * 1024 < need < 24 * 1024


@pytest.mark.parametrize("name", ["matmul", "attention"])
def test_the_chunks_barrier_orders_every_threads_copies_before_the_reads(name):
    """One barrier per chunk, after the wait: without it a warp reads rows another thread's
    cp.async wrote with nothing ordering the two. The emulator's fibers meet at every warp
    collective, so the values may still come out right; ThreadSanitizer, which sees each
    cp.async's write at its thread's wait, reports the race."""
    from napkin.runtime.emulate.errors import EmulatorError
    d = library(name, "f16")
    p = tc_plan(d) if name == "matmul" else flash_plan(d)
    shape = {"m": 37, "k": 144, "n": 40} if name == "matmul" else \
        with_static(d, {"b": 1, "h": 1, "q": 20, "x": 150})
    inputs = random_inputs(d, shape, 0)
    out = run_plan(p, inputs, shape, sanitize="thread", timeout_s=240)
    assert all(v.ok for v in compare.against_reference(d, inputs, out).values())
    dropped = lambda s: re.sub(r"(napkin_cp_async_wait<\d+>\(\);)\s*__syncthreads\(\);",  # noqa: E731
                               r"\1", s)
    assert dropped(render(lower(p))) != render(lower(p))
    with pytest.raises(EmulatorError) as exc:
        run_plan(p, inputs, shape, sanitize="thread", timeout_s=240, edit=dropped)
    assert exc.value.kind == "sanitizer" and "data race" in exc.value.headline


CAUSAL_BUGS = {
    # every full chunk taken for one below the diagonal (the unmasked loop runs them all):
    # the mask is dropped where it cuts
    "the mask dropped in every full chunk": lambda s: re.sub(
        r"c0 < cfull && \(\(\(long long\)\(c0 \+ \d+ - 1\) <= \(long long\)\(org_\d+\)\)\)",
        "c0 < cfull", s),
}


@pytest.mark.parametrize("bug", list(CAUSAL_BUGS))
def test_seeded_causal_bugs_give_wrong_values(bug):
    """Causal attention: chunks below the diagonal computed without the mask (blocks of
    rows at tile multiples and odd sizes); the hidden chunks are outside the loop's bounds
    (test_the_chunk_loop_runs_over_the_masks_band)."""
    d = library("causal_attention", "f16")
    p = flash_plan(d)
    shape = with_static(d, {"b": 1, "h": 1, "q": 300, "x": 300})
    source = render(lower(p))
    assert "c0 < cfull && (((long long)(c0 + " in source
    assert all(verdicts(d, p, shape))
    assert CAUSAL_BUGS[bug](source) != source
    assert not all(verdicts(d, p, shape, source_edit=CAUSAL_BUGS[bug]))


BAND_BUGS = {
    # the loop ends at its last chunk's start: the band's last chunk is not run
    "the band's last chunk dropped": lambda s: re.sub(r"plast \+ \d+", "plast", s),
    # the loop starts at the band's last chunk: every chunk before it is not run
    "the band's first chunks dropped": lambda s: s.replace("(plast < 0 ? 0 : pfirst)",
                                                           "(plast < 0 ? 0 : plast)"),
}


@pytest.mark.parametrize("name", ["causal_attention", "sliding_window_attention"])
@pytest.mark.parametrize("bug", [None, *BAND_BUGS])
def test_the_chunk_loop_runs_over_the_masks_band(name, bug):
    """A mask of indices bounds the chunk loop (codegen/masks.index_span): each block's loop
    runs from the first to the last chunk the mask may hold in, so its trip count follows
    the band (causal: ends at the block's diagonal; a window: also starts at its left edge).
    Against the reference at odd sizes and tile multiples; each bound moved is caught."""
    d = library(name, "f16", **({"w": 40} if name.startswith("sliding") else {}))
    p = flash_plan(d)
    source = render(lower(p))
    assert re.search(r"for \(int c0 = cfirst; c0 < cfull; c0 \+= \d+\)", source)
    for q in (300, 256):
        shape = with_static(d, {"b": 1, "h": 1, "q": q, "x": q})
        if bug is None:
            assert all(verdicts(d, p, shape))
        else:
            assert BAND_BUGS[bug](source) != source
            assert not all(verdicts(d, p, shape, source_edit=BAND_BUGS[bug])), q


TWO_BANDS = """axis b, h, q, x
axis d = 64
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = where(x < 256 or x >= size(x) - 256, Q * K / sqrt(size(d)), -inf)
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
out O: f16"""


@pytest.mark.parametrize("bug", [False, True])
def test_a_hidden_chunk_between_two_bands_is_skipped_and_its_prefetch_too(bug):
    """Two bands: the loop's bounds hold both, and the chunks between them are still tested
    in the loop, neither copied (the prefetch tests the next chunk) nor computed. Seeded:
    the prefetch's test read one chunk further on, so a chunk it needs is not copied."""
    d = napkin.load(Source("<two bands>", TWO_BANDS))
    p = flash_plan(d)
    source = render(lower(p))
    chunk = p.kernels[0].choice.stream[1]
    ahead = (p.kernels[0].schedule.stages - 1) * chunk     # the chunk the prefetch copies
    assert f"if (!(!((((long long)(c0 + {ahead}) < 256LL)" in source    # the prefetch's test
    shape = with_static(d, {"b": 1, "h": 1, "q": 37, "x": 600})     # a hidden chunk inside
    if not bug:
        assert all(verdicts(d, p, shape))
        return
    late = lambda s: s.replace(f"(long long)(c0 + {ahead}) < 256LL",   # noqa: E731
                               f"(long long)(c0 + {ahead + chunk}) < 256LL")
    assert not all(verdicts(d, p, shape, source_edit=late))


def test_the_model_visits_what_the_loop_runs():
    """Cost.visited: causal's blocks run the chunks up to their diagonal, the chunks they
    compute (one band); a mask of two bands runs the hidden chunks between them too, and
    explain says so."""
    from napkin.compiler import fractions
    from napkin.explain import render_text, report
    causal = flash_plan(library("causal_attention", "f16")).kernels[0]
    assert causal.cost.visited == pytest.approx(causal.cost.computed)
    assert causal.cost.visited < 0.6
    two = napkin.load(Source("<two bands>", TWO_BANDS))
    p = plan(two, "h100", {"b": 4, "h": 16, "q": 4096, "x": 4096})
    (kp,) = p.kernels
    assert kp.choice.warps and kp.cost.computed < 0.2
    assert kp.cost.visited == pytest.approx(1.0)     # the first and the last chunk hold
    mask = kp.model.mask
    tiles = {**dict(kp.choice.group), kp.choice.stream[0]: kp.choice.stream[1]}
    assert fractions.iterated_fraction(mask, p.sizes, tiles, "x") == pytest.approx(1.0)
    assert fractions.iterated_fraction(mask, p.sizes, tiles) == 1.0
    text = render_text(report(flash_plan(library("causal_attention", "f16"))))
    assert "each block's chunk loop runs from the first to the last chunk" in text


@pytest.mark.parametrize("name", ["mlp", "swiglu"])
def test_products_of_a_gradient_with_f32_cotangents_run_on_tensor_cores(name):
    """A cotangent or hidden activation is an f32 intermediate; beside a 16-bit operand it is
    rounded to that dtype as it is staged (compiler/tensorcore._rounded, as the chain's chunk
    values and FlashAttention's P are), so the backward's products (dX, dW1, dW2) run on the
    tensor cores rather than at the CUDA cores' f32 rate. Run at odd sizes against the
    float64 reference."""
    d = napkin.load(name)
    dyn = [a for a, s in d.axes.items() if s is None]
    g = napkin.grad(d)
    p = plan(g, "h100", {a: 4096 for a in dyn})
    eqs = {e.stmt: e.name for e in p.graph.graph["equations"]}
    products = [kp for kp in p.kernels if any(
        type(p.graph.nodes[n]["op"]).__name__ == "Contract" for n in kp.kernel.nodes)]
    assert products and all(kp.choice.warps for kp in products), \
        [([eqs[s] for s in kp.kernel.equations], kp.schedule.engine) for kp in products]
    src = render(lower(p))
    # the f32 cotangents and activations read only by these products are stored f16 by the
    # kernels computing them (compiler/stored16.py; staged rounding of an f32 one is
    # test_a_rounded_tile_is_staged_16_bytes_at_a_time's)
    stored = {line.split()[0] for line in stored16.said(p)}
    assert "H" in stored and len(stored) >= 2, stored
    assert "napkin_from_float<__half>(p" not in src
    small = dict(zip(dyn, (37, 45, 29, 23)))
    inputs = random_inputs(g, small, 3)
    for v in compare.against_reference(g, inputs, run_plan(p, inputs, small, timeout_s=300)).values():
        assert v.ok, v.message


ROUNDED_BUGS = {
    # the two values of each packed pair swapped
    "pairs packed in the wrong order": lambda s: s.replace("(cv.x, cv.y)", "(cv.y, cv.x)"),
    # the second pair of the four dropped
    "the second pair dropped": lambda s: s.replace("(cv.z, cv.w)", "(0.0f, 0.0f)"),
}


@pytest.mark.parametrize("bug", [None, *ROUNDED_BUGS])
def test_a_rounded_tile_is_staged_16_bytes_at_a_time(bug):
    """mlp's second product stages the f32 hidden activation rounded to f16: four values per
    16-byte load, packed in pairs, one 8-byte store (codegen/tiles, RVECTOR) where the rows
    allow it (the size test outside the chunk loop: f a multiple of 4, o of 8), one value at
    a time where they do not.
    On the emulator against the reference, both paths; each seeded bug in the packing shows."""
    # H declared f32 (left to the planner it is stored f16: compiler/stored16.py)
    d = napkin.load(library_source("mlp").text.replace("H[t f] =", "H[t f]: f32 ="))
    p = tc_plan(d)
    source = render(lower(p))
    assert "*reinterpret_cast<const float4*>(" in source and "napkin_pack_half2(cv.x, cv.y)" in source
    for shape in ({"t": 37, "m": 29, "f": 48, "o": 24}, {"t": 37, "m": 29, "f": 45, "o": 24}):
        shape = {a: v for a, v in shape.items() if a in d.axes and d.axes[a] is None}
        if bug is None:
            assert all(verdicts(d, p, shape)), shape
        elif shape.get("f", 0) % 4 == 0:       # (the scalar path has no pairs to break)
            assert ROUNDED_BUGS[bug](source) != source
            assert not all(verdicts(d, p, shape, source_edit=ROUNDED_BUGS[bug]))


def test_an_f32_input_is_not_rounded_for_the_tensor_cores():
    """The user's own f32 operand stays f32: its product stays on the CUDA cores."""
    d = napkin.load("axis m, k, n\nin A[m k]: f32\nin B[k n]: f16\nC[m n] = A * B\nout C: f32")
    p = plan(d, "h100", {"m": 4096, "k": 4096, "n": 4096})
    assert not p.kernels[0].choice.warps


@pytest.mark.parametrize("q", [45, 130])
def test_varlen_attention_is_flashattention_with_its_document_mask(q):
    """varlen_attention's mask reads the document ids at renamed positions (doc[q] beside
    doc[x]); FlashAttention evaluates it at every score like an index mask. Packed documents
    of random lengths (a row whose document starts at it sees itself only), odd sizes."""
    import numpy as np
    d = library("varlen_attention", "f16")
    p = flash_plan(d)
    assert len(p.kernels) == 1
    rng = np.random.default_rng(q)
    shape = with_static(d, {"h": 3, "q": q, "x": q})
    inputs = random_inputs(d, shape, q)
    inputs["doc"] = np.sort(rng.integers(0, 5, q)).astype(np.int32)
    out = run_plan(p, inputs, shape, timeout_s=240)
    for v in compare.against_reference(d, inputs, out).values():
        assert v.ok, v.message


SCALED = """\
axis b, h, q, x
axis d = 16
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = where(x <= q + 3, Q * K {scale}, -inf)
P[b h q x] = softmax[x](S)
O[b h q d] = P * V
out O: f32
"""


@pytest.mark.parametrize("scale, folded", [
    ("/ sqrt(size(d))", True), ("* 0.75", True), ("* (0.0 - 0.5)", False), ("* 1.0 + 0.25", True),
])
def test_the_softmax_scale_is_folded_into_the_exponent_only_when_positive(scale, folded):
    """`Q * K / sqrt(size(d))` under a mask: the scores stay unscaled and the factor joins
    log2(e) in the exponent's FFMA (qkl); a negative factor (it reverses the row's order) is
    no factor and is applied per score; a shift is a bias beside the factor, added to the
    unscaled scores over it (compiler/bias_fold.py). Emulated against the float64 reference,
    and the statistics forward's logsumexp (the row maximum unscaled: m * scale + log l)."""
    text = SCALED.format(scale=scale)
    d = napkin.load(text)
    p = plan(d, "h100", {"b": 1, "h": 2, "q": 37, "x": 45}, engine="tensor-cores")
    source = render(lower(p))
    assert ("napkin_ex2(fmaf(sc[i0][i2][2 * i1 + i3], qkl, sl))" in source) == folded
    rng = np.random.default_rng(8)
    Q, K, V = (rng.standard_normal((1, 2, n, 16)).astype(np.float16) for n in (37, 45, 45))
    (want,) = napkin.run(d, Q, K, V, backend="reference")
    (got,) = napkin.run(d, Q, K, V, backend="emulate", target="h100", engine="tensor-cores")
    np.testing.assert_allclose(got, want, atol=5e-3, rtol=0)
    if folded:
        O, lse = napkin.compile(text, backend="emulate", target="h100", engine="tensor-cores",
                                save_for_backward=True)(Q, K, V)
        _, want_lse = napkin.compile(text, save_for_backward=True)(Q, K, V)
        np.testing.assert_allclose(lse, want_lse, atol=2e-3, rtol=0)


def test_the_heaviest_blocks_launch_first():
    """Causal attention's later query tiles run more chunks (their keys reach further): the
    schedule walks q slowest and from its last tile (Schedule.reversed, FlashAttention's
    order), so the last wave holds the lightest blocks; plain attention keeps its order.
    The emulated result is the reference's, at tile multiples and odd sizes."""
    causal, plain = library("causal_attention", "f16"), library("attention", "f16")
    shape = {"b": 4, "h": 16, "q": 4096, "x": 4096}
    (kp,) = plan(causal, "h100", shape).kernels
    assert kp.schedule.reversed == ("q",)
    assert plan(plain, "h100", shape).kernels[0].schedule.reversed == ()
    p = flash_plan(causal)
    assert p.kernels[0].schedule.reversed == ("q",)
    source = render(lower(p))
    assert re.search(r"org_\d+ = \(int\)\(\(\(\(long long\)\(n\d+\) \+ \d+\) / \d+\) - 1 - ", source)
    for q, x in ((128, 256), (77, 130)):
        assert all(v.ok for v in verdicts(causal, p, with_static(causal, {"b": 2, "h": 2, "q": q, "x": x})))
    # seeded: the reversed index one tile off (the first tile never computed)
    off = lambda s: re.sub(r"(org_\d+ = \(int\)\(\(\(\(long long\)\(n\d+\) \+ \d+\) / \d+\)) - 1 - ",  # noqa: E731
                           r"\1 - ", s)
    assert off(source) != source
    assert not all(v.ok for v in verdicts(causal, p, with_static(causal, {"b": 1, "h": 1, "q": 200, "x": 200}),
                                          source_edit=off))
