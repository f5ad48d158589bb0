"""Heads whose rows are no multiple of 16 bytes (16-bit d = 36: 72-byte rows; 20, 44; 18:
36-byte rows) on FlashAttention: their tiles are copied by the widest cp.async a row's
alignment allows (compiler/copies.row_widths: a row starts at a multiple of d x 2 bytes
from a 16-byte aligned array, codegen/program.Program.alignment), 8 or 4 bytes, zeros past
the head (was one value at a time); an odd head still copies one value at a time. The
model charges the copies emitted (copies.tensor_copies: over the padded tile, at their
width; tests/codegen/test_copy_charge.py counts them by hand). Emulated against the float64 reference at odd sizes, f16 and bf16, causal or not;
a seeded copy of half of each vector fails."""

from __future__ import annotations

import re

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler import copies, headpad
from napkin.compiler.cost import evaluate
from napkin.compiler.schedule import ATTENTION
from napkin.explain import render_text, report
from napkin.pipeline import run_plan
from napkin.runtime import compare

from .test_padded_heads import ODD, long_plan



@pytest.mark.parametrize("head, nbytes", [(36, 8), (20, 8), (44, 8), (18, 4), (37, None),
                                          (40, 16)])
def test_a_head_copies_by_the_widest_cp_async_its_rows_allow(head, nbytes):
    p = long_plan("attention", head)
    assert [kp.schedule.engine for kp in p.kernels] == [ATTENTION]
    src = render(lower(p))
    body = src[src.index("__global__"):]
    widths = set(re.findall(r"napkin_cp_async_(\d+)\(", body))
    said = render_text(report(p))
    if nbytes is None:      # an odd head: one value at a time, no cp.async of Q, K, V
        assert not widths and f"&& ei < {head}) ? p" in body
        assert f"d = {head} are no 16-byte multiple: its tiles are copied one value at a " \
            "time" in said, said
        return
    assert (f"copied {nbytes} bytes at a time" in said) == (nbytes < 16), said
    assert widths == {str(nbytes)}, widths
    # zero fill past the head: the column tested where the tile is padded
    assert f"&& ei < {head}) ? {nbytes} : 0" in body
    assert copies.vector_values(head, headpad.up(head, 8), 2) * 2 == nbytes


def test_the_model_charges_the_narrower_copies_emitted(monkeypatch):
    """d = 36: 8-byte copies (4 values) over Q's and K's tiles padded to 48 and V's to 40,
    where 16-byte ones over the real 36 were charged (copies.tensor_copies); d = 18: 4-byte
    ones over 32 and 24; the model's issue time up with them."""
    for head, values in ((36, 4), (18, 2)):
        p = long_plan("attention", head)
        (kp,) = p.kernels
        site = kp.schedule.site
        held = {**p.sizes, **dict(kp.choice.group), kp.choice.stream[0]: kp.choice.stream[1]}
        for a in kp.model.arrays:
            if a.role != "load":
                continue
            extent = headpad.extent(site, a.node, a.axes[-1], head)
            assert extent > head and extent % 8 == 0
            found = copies.tensor_values(a, {x: held[x] for x in a.axes}, p.sizes,
                                         kp.model.fixed, kp.model.padded, False)
            assert found == (values, a.axes[-1], extent, False)
        with monkeypatch.context() as m:
            m.setattr(copies, "tensor_values", lambda a, held, *_: (
                8, a.axes[-1], held[a.axes[-1]], False))
            before = evaluate(kp.model, kp.columns, kp.choice, p.sizes, p.target)
        after = evaluate(kp.model, kp.columns, kp.choice, p.sizes, p.target)
        assert dict(after.compute_parts)["issue"] > 1.02 * dict(before.compute_parts)["issue"]
    # a head of 16-byte rows padded (40: Q and K to 48) is charged over its padded tile too
    p = long_plan("attention", 40)
    (kp,) = p.kernels
    q = next(a for a in kp.model.arrays if a.node == kp.schedule.site.q)
    held = {**p.sizes, **dict(kp.choice.group)}
    assert copies.tensor_values(q, {x: held[x] for x in q.axes}, p.sizes, kp.model.fixed,
                                kp.model.padded, False)[::2] == (8, 48)


EMULATED = [("attention", 36, "f16"), ("causal_attention", 20, "bf16"),
            pytest.param("causal_attention", 18, "f16", marks=pytest.mark.thorough),
            pytest.param("attention", 44, "bf16", marks=pytest.mark.thorough),
            pytest.param("causal_attention", 36, "bf16", marks=pytest.mark.thorough)]


def _matches(name: str, head: int, dtype: str, edit=None) -> bool:
    p = long_plan(name, head, dtype)
    inputs = random_inputs(p.diagram, ODD, head + len(name) + len(dtype))
    try:
        out = run_plan(p, inputs, ODD, timeout_s=240, edit=edit)
    except napkin.NapkinError:
        return False
    return all(v.ok for v in compare.against_reference(p.diagram, inputs, out).values())


@pytest.mark.parametrize("name, head, dtype", EMULATED)
def test_the_narrow_copies_match_the_reference_on_the_emulator(name, head, dtype):
    assert _matches(name, head, dtype)


def test_seeded_half_vector_copies_give_wrong_values():
    """d = 36: each 8-byte copy moving only its first 4 bytes (the rest zero-filled)."""
    def edit(src: str) -> str:
        assert src.count("? 8 : 0") >= 3
        return src.replace("? 8 : 0", "? 4 : 0")
    assert not _matches("attention", 36, "f16", edit)
