"""The points of a CUDA-core thread that share a paired online softmax's row (a thread tile
along d, which the softmax's rows lack: a decode split's merge kernel) share ONE running max
and sum (codegen/accum.declare's leaders): one max update, rescale and exponential per row and
partial (or group of Schedule.fold partials), one merge of (m, l) per lanes' butterfly step
and one reciprocal per row, each point's output row rescaled with the same factors. Counted in
the emitted CUDA, and run on the emulator at odd sizes against the float64 reference: an odd
number of partials over lanes (a ragged last chunk, and a chunk the lanes walk raggedly), some
of them empty (fully masked: len[b] < x, and partials past the keys), groups of partials with
a remainder, and the attention decode split at x = 4097."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.runtime import compare

from .conftest import emulate_buffers, library, shape_of

PAGED = dict(b=4, g=8, r=4, q=1, n=300)


def _paged(split):
    """paged_attention over 1001 keys at b=4, g=8, r=4, q=1, split in `split` partials."""
    d = library("paged_attention", "f16", x=1001, j=63)
    shape = shape_of(d, **PAGED)
    return d, plan(d, "h100", shape, overrides={"split": {"x": split}}, engine="cuda-cores",
                   merge="kernel"), shape   # (the merges beside a CUDA-core partial, apart)


def _decode(d_tile):
    """attention at b = h = q = 1 and x = 4097 (the planner's decode split), its merge
    kernel's thread holding `d_tile` points along d."""
    d = library("attention", "f16")
    shape = shape_of(d, b=1, h=1, q=1, x=4097)
    p = plan(d, "h100", shape)
    merge = p.kernels[-1].choice
    thread = tuple((a, d_tile if a == "d" else t) for a, t in merge.thread)
    return d, with_choices(p, [kp.choice for kp in p.kernels[:-1]] +
                           [replace(merge, thread=thread)]), shape


def _loop(kernel: str, head: str) -> str:
    """The body of the first loop of `kernel` whose header starts with `head` (to its brace)."""
    at = kernel.index(head)
    depth, i = 0, kernel.index("{", at)
    for j in range(i, len(kernel)):
        depth += {"{": 1, "}": -1}.get(kernel[j], 0)
        if depth == 0:
            return kernel[i:j]
    raise AssertionError(head)


def _run(d, p, shape, edit=None):
    inputs = random_inputs(d, shape, 7)
    if "pages" in inputs:   # (random_inputs's integers are below every size: q = 1 makes them
        rng = np.random.default_rng(7)     # 0, every key masked) a page table of distinct
        b, j = inputs["pages"].shape       # pages in random order; every key, none, a few,
        inputs["pages"] = rng.permutation(shape["n"])[:b * j].reshape(b, j).astype(np.int32)
        inputs["len"] = np.array([1001, 0, 37, 600], dtype=np.int32)    # an odd share
    out = emulate_buffers(p, inputs, shape, edit=edit, grid=6)
    ref, low, order = compare.references(d, inputs, p)
    return [compare.check(out[s.name], ref[s.name], low[s.name], s.dtype, s.name, order[s.name])
            for s in d.outputs]


def _merge_kernel(p):
    """The merge's schedule and the source's last kernel, which runs it (alone, or after the
    partials in its last block: codegen/tail.py)."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    return p.kernels[-1].schedule, render(lower(p)).split('extern "C" __global__')[-1]


def _rows_and_points(sched):
    """(rows, points) of the merge kernel's thread: its tile along the softmax's rows (every
    woven axis but d) and in all."""
    rows = points = 1
    for a, t in sched.thread:
        points *= t
        rows *= 1 if a == "d" else t
    return rows, points


# (partials, the merge's lanes, its thread's points along d): an odd number of partials over
# 8 lanes (chunks of 64 and 63), over 16 lanes (one chunk of 129, the lanes ragged)
@pytest.mark.parametrize("split, lanes, points", [pytest.param(127, 8, 2, marks=pytest.mark.thorough),
                                                   (129, 16, 4)])
def test_the_decode_merge_computes_each_rows_softmax_once(split, lanes, points):
    d, p, shape = _paged(split)
    # (the merge's choice fixed, as the planner took it: since what follows the lanes' merge
    # is counted on every lane, issue_pair.beside, it takes 8 lanes over 129 partials)
    merge = p.kernels[-1].choice
    p = with_choices(p, [kp.choice for kp in p.kernels[:-1]] + [replace(
        merge, split=("p_x", lanes),
        thread=tuple((a, points if a == "d" else t) for a, t in merge.thread))])
    sched, kernel = _merge_kernel(p)
    assert sched.split == ("p_x", lanes) and sched.fold == 1
    rows, got = _rows_and_points(sched)
    assert (rows, got) == (1, points)
    # per partial: the rescale exp(m_old - m_new) and the weight exp(lse - m_new), per row
    body = _loop(kernel, "for (int xl = lane;")
    assert body.count("napkin_ex2(") == 2 * rows, body
    assert body.count("napkin_max(") == rows
    # each point's output row takes the row's factors: `o = o * scale + p * part`
    assert len(re.findall(r"st\d+\[0\] = st\d+\[0\] \* v\d+ \+ v\d+ \* ", body)) == points
    # the lanes' butterfly: one loop over `off`, (m, l) merged once, every point's o in it
    assert kernel.count("for (int off = ") == 1
    merge = _loop(kernel, "for (int off = ")
    assert merge.count("napkin_ex2(") == 2 * rows
    assert merge.count("__shfl_xor_sync(") == 2 * rows + points
    assert kernel.count("== 0.0f ? 0.0f : 1.0f / ") == rows       # one reciprocal a row
    assert all(v.ok for v in _run(d, p, shape)), _run(d, p, shape)


def test_groups_of_partials_share_the_rows_factors():
    """7 partials (no lanes: the merge streams them in groups of Schedule.fold, then the last
    3 one by one): a group's max, rescale and exps once per row, each point's row their sum.
    (The merge's choice is fixed: no lanes, two points along d; the planner's own choice among
    such small merges moves with the model.)"""
    d, p, shape = _paged(7)
    merge = p.kernels[-1].choice
    p = with_choices(p, [kp.choice for kp in p.kernels[:-1]] + [replace(
        merge, split=None, thread=tuple((a, 2 if a == "d" else t) for a, t in merge.thread))])
    sched, kernel = _merge_kernel(p)
    assert sched.split is None and sched.fold == 4
    rows, points = _rows_and_points(sched)
    assert (rows, points) == (1, 2)
    grouped = _loop(kernel, "for (int xl = 0; xl < clen / 4 * 4")
    assert grouped.count("napkin_ex2(") == rows * (1 + sched.fold)
    assert len(re.findall(r"st\d+\[0\] = st\d+\[0\] \* v\d+ \+ ", grouped)) == points
    assert all(v.ok for v in _run(d, p, shape)), _run(d, p, shape)


def test_a_point_that_misses_the_rows_rescale_is_caught():
    """The seeded bug: the thread's last point adds the partial's weighted row without the
    row's shared rescale exp(m_old - m_new)."""
    d, p, shape = _paged(127)

    def drop(source):
        at = source.rindex("for (int xl = lane;")
        last = list(re.finditer(r"(st\d+\[0\]) = st\d+\[0\] \* v\d+ \+ ", source[at:]))[-1]
        start, end = at + last.start(), at + last.end()
        return source[:start] + f"{last.group(1)} = {last.group(1)} + " + source[end:]
    assert not all(v.ok for v in _run(d, p, shape, drop))


@pytest.mark.thorough
@pytest.mark.parametrize("d_tile", [1, 2])
def test_the_attention_decode_split_merges_exactly(d_tile):
    d, p, shape = _decode(d_tile)
    sched, kernel = _merge_kernel(p)
    assert dict(sched.thread)["d"] == d_tile and sched.split[0] == "p_x"
    assert _loop(kernel, "for (int xl = lane;").count("napkin_ex2(") == 2
    assert all(v.ok for v in _run(d, p, shape)), _run(d, p, shape)
