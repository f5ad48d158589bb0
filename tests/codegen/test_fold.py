"""A paired online softmax on the CUDA cores folds Schedule.fold keys per update
(compiler/fold.py): their scores, one running-max update, ONE rescale of the running sum and
of the output row, one exponential per score; the chunk's last `clen mod fold` keys one by one.
On the emulator at odd sizes next to the tiles' multiples against the float64 reference:
chunks that are and are not multiples of the group, a chunk shorter than it (no groups), a
mask, the decode split of the keys with its merge kernel, a seeded wrong rescale."""

from __future__ import annotations

from dataclasses import replace

import pytest

from napkin.commands.run import random_inputs
from napkin.compiler import fold
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.runtime import compare

from .conftest import emulate_buffers, library, shape_of


def _run(d, p, shape, edit=None):
    inputs = random_inputs(d, shape, 5)
    out = emulate_buffers(p, inputs, p.sizes, edit=edit, grid=6)
    ref, low, order = compare.references(d, inputs, p)
    return [compare.check(out[s.name], ref[s.name], low[s.name], s.dtype, s.name, order[s.name])
            for s in d.outputs]


def _forced(name, shape, chunk):
    d = library(name, "f16")
    shape = shape_of(d, **shape)
    p = plan(d, "h100", shape, engine="cuda-cores")
    if chunk is not None:
        p = with_choices(p, [replace(p.kernels[0].choice, stream=("x", chunk))])
    return d, p, shape


# (diagram, sizes, forced chunk, the fold the schedule takes): a chunk of 32 with a
# remainder of x (50 = 32 + 18 keys: 4 groups and 2 keys in the last chunk), a chunk of 6
# (a group and 2 keys in every chunk), of 3 (shorter than a group: one key at a time), causal
CASES = [("attention", dict(b=1, h=1, q=37, x=50), 32, fold.FOLD),
         ("attention", dict(b=1, h=1, q=33, x=47), 6, fold.FOLD),
         ("attention", dict(b=1, h=1, q=17, x=13), 3, 1),
         ("causal_attention", dict(b=1, h=2, q=67, x=67), 6, fold.FOLD)]


@pytest.mark.parametrize("name, shape, chunk, folded", CASES)
def test_groups_of_keys_fold_exactly(name, shape, chunk, folded):
    d, p, shape = _forced(name, shape, chunk)
    (kp,) = p.kernels
    assert kp.schedule.fold == folded
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    source = render(lower(p))
    grouped = f"for (int xl = 0; xl < clen / {folded} * {folded}; xl += {folded})"
    assert (grouped in source) == (folded > 1)
    assert all(v.ok for v in _run(d, p, shape)), _run(d, p, shape)


def test_a_wrong_group_rescale_is_caught():
    """The seeded bug: the running sum not rescaled by the group's exp(m_old - m_new)."""
    d, p, shape = _forced("attention", dict(b=1, h=1, q=33, x=47), 6)

    def drop(source):       # `st1 = st1 * v9 + v10 + ...`: the first row's sum, not rescaled
        at = source.index("for (int xl = 0; xl < clen / 4 * 4")
        head, body = source[:at], source[at:]
        start = body.index("st1 = st1 * ")
        end = body.index(" + ", start)
        return head + body[:start] + "st1 = st1" + body[end:]
    assert not all(v.ok for v in _run(d, p, shape, drop))


@pytest.mark.thorough
def test_the_decode_split_folds_its_keys_and_merges():
    """b = q = 1, h = 4 and x = 4097: the planner splits the keys over blocks on the CUDA
    cores (a partial kernel, a merge kernel); its partial streamed in chunks of 16 (33 keys
    a block: 16, 16 and 1, the planner's own takes each block's keys whole), folding groups;
    the output against the reference."""
    d = library("attention", "f16")
    shape = shape_of(d, b=1, h=4, q=1, x=4097)
    # (the CUDA cores named: with the tensor cores allowed the partial is FlashAttention-2's)
    # (planned at h = 4: at h = 1 the scores take a kernel of their own before the partial,
    # 8.9 against 9.4 us, model, h100, and the partial has no product to fold)
    p = plan(d, "h100", shape, engine="cuda-cores")
    assert len(p.kernels) == 2 and "s_x" in p.kernels[0].model.reduced
    p = with_choices(p, [replace(p.kernels[0].choice, stream=("s_x", 16))] +
                     [kp.choice for kp in p.kernels[1:]])
    assert len(p.kernels) == 2 and p.kernels[0].schedule.fold == fold.FOLD
    assert all(v.ok for v in _run(d, p, shape))
