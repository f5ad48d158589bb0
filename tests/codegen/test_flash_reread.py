"""Q re-read from shared memory every chunk (Schedule.reread, codegen/flash._scores_reread),
run by the CPU emulator against the float64 reference, and against the same tiling holding
Q in registers: the products accumulate the head's slices in the same order, so the two
give the same bits. Seeded bugs in the re-read must show."""

from __future__ import annotations

import dataclasses

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.pipeline import run_plan
from napkin.runtime import compare

from .conftest import library
from .test_tensor_cores import flash_plan, on_tensor_cores, with_static


def reread(p, on: bool = True, rows: tuple[int, int] | None = None, chunk: int | None = None):
    """The plan with its attention kernel's Q re-read (or held), optionally retiled: `rows`
    (block rows, warps), `chunk` keys."""
    (kp,) = p.kernels
    c = kp.choice
    row = c.warps[0][0]
    change = {"reread": on}
    if rows is not None:
        bm, wm = rows
        change.update(group=tuple(sorted({**dict(c.group), row: bm}.items())),
                      thread=tuple(sorted({**dict(c.thread), row: bm // wm}.items())),
                      warps=((row, wm),))
    if chunk is not None:
        change["stream"] = (c.stream[0], chunk)
    return with_choices(p, [dataclasses.replace(c, **change)])


def outputs(d, p, shape, seed, edit=None):
    inputs = random_inputs(d, shape, seed)
    out = run_plan(p, inputs, shape, timeout_s=240, edit=edit)
    return inputs, out


CASES = {
    # name: (diagram, dtype, -D, planned shape's odd sizes, (block rows, warps) or None, chunk)
    "attention f16, planned tiles": ("attention", "f16", {}, {"q": 37, "x": 150}, None, None),
    "causal bf16, 32 rows a warp": ("causal_attention", "bf16", {}, {"q": 70, "x": 129},
                                    (64, 2), 32),
    "head 48: three slices": ("attention", "f16", {"d": 48}, {"q": 17, "x": 64}, (32, 1), 16),
    "head 128, 128 keys a chunk": ("attention", "bf16", {"d": 128}, {"q": 45, "x": 127},
                                   (64, 4), 128),
    "gqa, whole chunks": ("gqa_attention", "f16", {}, {"q": 33, "x": 64}, (32, 2), 32),
}


@pytest.mark.parametrize("case", list(CASES))
def test_q_reread_matches_the_reference_and_the_held_kernel(case):
    name, dtype, defines, sizes, rows, chunk = CASES[case]
    d = library(name, dtype, **defines)
    base = flash_plan(d)
    held, again = reread(base, False, rows, chunk), reread(base, True, rows, chunk)
    assert again.kernels[0].schedule.reread and not held.kernels[0].schedule.reread
    shape = with_static(d, {"b": 1, "h": 2, "g": 2, "r": 3, **sizes})
    shape = {a: v for a, v in shape.items() if a in d.axes}
    inputs, out = outputs(d, again, shape, len(case))
    for v in compare.against_reference(d, inputs, out).values():
        assert v.ok, v.message
    _, kept = outputs(d, held, shape, len(case))
    assert all(out[n].tobytes() == kept[n].tobytes() for n in out)


def test_q_reread_with_transposed_q_and_a_value_width_of_its_own():
    """Q stored head-major (ldmatrix .trans for its slices), V's width not the head's."""
    text = ("axis b, q, x\naxis d = 32\naxis e = 24\nin Q[b d q]: f16\nin K[x b d]: f16\n"
            "in V[x b e]: f16\nS[b q x] = where(x <= q + 3, Q * K * 0.2, -inf)\n"
            "P[b q x] = softmax[x](S)\nO[b q e] = P * V\nout O: f32")
    d = napkin.load(text)
    p = reread(plan(d, "h100", {"b": 4, "q": 4096, "x": 4096}))
    assert on_tensor_cores(p) and "napkin_ldmatrix_x4_trans(qa," in render(lower(p))
    shape = {"b": 2, "q": 41, "x": 77}
    inputs, out = outputs(d, p, shape, 5)
    for v in compare.against_reference(d, inputs, out).values():
        assert v.ok, v.message


def test_a_head_of_512_planned_with_q_re_read_matches_the_reference():
    """The planner's own choice where Q's fragments cannot be held (tests/compiler/
    test_flash_reread.py): 32 slices of the head a chunk."""
    text = ("axis b, h, q, x\naxis d = 512\naxis e = 64\nin Q[b h q d]: bf16\n"
            "in K[b h x d]: bf16\nin V[b h x e]: bf16\nS[b h q x] = Q * K / sqrt(size(d))\n"
            "P[b h q x] = softmax[x](S)\nO[b h q e] = P * V\nout O: bf16")
    d = napkin.load(text)
    p = plan(d, "h100", {"b": 4, "h": 16, "q": 4096, "x": 4096})
    assert [kp.schedule.reread for kp in p.kernels] == [True]
    shape = {"b": 1, "h": 2, "q": 33, "x": 47}
    inputs, out = outputs(d, p, shape, 9)
    for v in compare.against_reference(d, inputs, out).values():
        assert v.ok, v.message


REREAD_BUGS = {
    # (Q's tile is swizzled: its slices' lane addresses are a table before the block loop)
    # every slice read at the head's first 16
    "the slice's head offset dropped": lambda s: s.replace(
        "sw0[i2] = ((lane % 16) * 64 + ((i2 * 16 + (lane / 16) * 8)",
        "sw0[i2] = ((lane % 16) * 64 + ((0 * 16 + (lane / 16) * 8)"),
    # the k halves of Q's A fragment swapped
    "the fragment's k halves swapped": lambda s: s.replace(
        "sw0[i2] = ((lane % 16) * 64 + ((i2 * 16 + (lane / 16) * 8)",
        "sw0[i2] = ((lane % 16) * 64 + ((i2 * 16 + (1 - lane / 16) * 8)"),
    # every warp reads the first warp's rows
    "the warp's rows dropped": lambda s: s.replace(
        "napkin_ldmatrix_x4(qa, reinterpret_cast<const char*>(sm0) + (sw0[i2]) + (wr * 16 + ",
        "napkin_ldmatrix_x4(qa, reinterpret_cast<const char*>(sm0) + (sw0[i2]) + ("),
}


@pytest.mark.parametrize("bug", list(REREAD_BUGS))
def test_seeded_reread_bugs_give_wrong_values(bug):
    d = library("attention", "f16")
    p = reread(flash_plan(d))
    source = render(lower(p))
    assert REREAD_BUGS[bug](source) != source
    shape = with_static(d, {"b": 1, "h": 2, "q": 37, "x": 150})
    inputs, out = outputs(d, p, shape, 2, edit=REREAD_BUGS[bug])
    assert not all(v.ok for v in compare.against_reference(d, inputs, out).values())
