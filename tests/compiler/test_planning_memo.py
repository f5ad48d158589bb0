"""The cost model's hoisted and memoised parts give what the direct computation gives, on
random candidate sets: index_width.wide (the arrays' strides memoised on extents and sizes,
each axis's overshoot computed once) and across_warps (the merge sites kept for the
evaluation that asks three times, a site no candidate splits over warps skipped). The
direct computations are written out here as the oracles (the code before the hoist)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import napkin
from napkin.compiler import across_warps, index_width
from napkin.compiler.choices import Choices
from napkin.compiler.plan import plan

AXES = ("a", "b", "c", "d")
SIZES = (1, 3, 7, 64, 1000, 2**15 + 1, 2**20 - 3, 2**24 + 1, 2**30 + 5)


def _direct_wide(extents, sizes: dict, choice):
    """index_width.wide before the hoist: every array's products and every axis's overshoot
    computed where used (a padded row's last dimension its pitch, compiler/pitch.py)."""
    arrays = [(axes, [max(1.0, float(sizes[a])) for a in axes[:-1]] +
               [float(-(-max(1, sizes[axes[-1]]) // (values or 1)) * (values or 1))])
              for axes, values in extents]
    if any(math.prod(d) > index_width.INT_MAX for _, d in arrays):
        return True
    steps = index_width._steps(choice)

    def reach(bound):
        out = [float(sizes[a]) + index_width._past(steps, a, bound) for a in sizes]
        for axes, d in arrays:
            out.append(math.prod(d) - 1 + sum(index_width._past(steps, a, bound) *
                                              math.prod(d[i + 1:])
                                              for i, a in enumerate(axes)))
        return functools.reduce(np.maximum, out, 0.0)
    if reach(max) <= index_width.INT_MAX:
        return False
    return reach(None) > index_width.INT_MAX


def _candidates(rng, axes, dims: int = 3) -> Choices:
    """A random open mesh of candidates: groups, thread tiles, a chunk and splits."""
    lengths = [int(n) for n in rng.integers(1, 6, size=dims)]     # (the mesh's shape)

    def values(dim, low=1, high=4096):
        shape = [1] * dims
        shape[dim] = lengths[dim]
        return rng.choice([1.0, 2.0, 16.0, float(low), 64.0, 256.0, float(high)],
                          size=shape)
    picked = list(rng.permutation(axes))
    group = tuple((a, values(0)) for a in picked[:2])
    thread = tuple((a, values(0, high=8)) for a in picked[:1])
    stream = (picked[2], values(1)) if rng.random() < 0.7 else None
    split = tuple((a, values(2, high=1024)) for a in picked[3:4])
    return Choices(group, stream, thread, split)


def test_wide_is_the_direct_computation_on_random_candidates():
    rng = np.random.default_rng(7)
    # a few extents asked at many sizes: a memo keyed on the extents alone answers wrong
    pool = [tuple((tuple(rng.permutation(AXES)[:int(rng.integers(1, 5))]),
                   int(rng.choice([0, 0, 8])))       # (8: rows padded to 8 values)
                  for _ in range(int(rng.integers(1, 4)))) for _ in range(4)]
    assert any(values for extents in pool for _, values in extents)
    seen = set()
    for _ in range(300):
        extents = pool[int(rng.integers(len(pool)))]
        sizes = {a: int(rng.choice(SIZES)) for a in AXES}
        choice = _candidates(rng, AXES)
        want = _direct_wide(extents, sizes, choice)
        got = index_width.wide(extents, sizes, choice)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        seen.add(str(np.unique(np.asarray(want))))
    # both answers (and sets mixing them) were met: the test reaches every branch
    assert {"[False]", "[ True]", "[False  True]"} <= seen, seen


_LSE = "axis r, c\nin X[r c]: f32\nL[r] = logsumexp[c](X)\nY[r c] = softmax[c](X)\n" \
       "out L: f32\nout Y: f32\n"


def _direct_sites(model, choice, sizes):
    split = [a for a, _ in choice.split]
    thread = dict(choice.thread)
    stream = choice.stream[0] if choice.stream else None
    paired = {c for _, c in model.streaming.pairs}
    out = []
    op = {w.node: w.op for w in model.work}
    for a in model.arrays:
        if a.role == "accumulator" and stream in split:
            held = math.prod(thread[x] for x in a.axes if x in thread)
            out.append((stream, across_warps._STREAMED.get(
                op.get(a.node), "pair" if a.node in paired else "sum"), a.slots, held))
    for w in model.work:
        if w.op == "contract" or w.engine == "contraction":
            ops = across_warps.SITES["contract"]
        else:
            ops = across_warps.ONLINE if w.node in model.online else \
                across_warps.SITES.get(w.op, ())
        for axis in split:
            if axis in w.axes and axis != stream:
                held = math.prod(thread[x] for x in w.axes if x in thread) * \
                    (sizes[stream] if stream in w.axes else 1)
                out += [(axis, kind, slots, held) for kind, slots in ops]
    return out


def _direct_across(model, choice, sizes, threads):
    """(exchange_bytes, instructions, cycles) before the hoist: every site, every time."""
    aw = across_warps
    warps = np.ceil(np.asarray(threads, dtype=float) / aw.WARP)
    stream = choice.stream[0] if choice.stream else None
    exchange = instructions = cycles = 0.0
    for axis, kind, slots, held in _direct_sites(model, choice, sizes):
        g = aw.groups(choice, axis)
        points = held if axis == stream else 1.0
        widths = (4, 8) if kind in ("argmax", "argmin") else (4,) * slots
        cells = sum(aw._aligned(warps * points * w) for w in widths)
        exchange = exchange + np.where(g > 1, cells, 0.0)
        instructions = instructions + np.where(g > 1, held * (aw.ACROSS_SITE + (g - 1) * (
            slots * aw.ACROSS_READ + aw.STEP[kind])), 0.0)
        cycles = cycles + np.where(g > 1, held * (aw.SITE_CYCLES + g * aw.WARP_CYCLES), 0.0)
    return exchange, instructions, cycles


@pytest.fixture(scope="module")
def lse_model():
    p = plan(napkin.load(_LSE), "h100", {"r": 7, "c": 5001})
    model = next(kp.model for kp in p.kernels if "c" in kp.model.reduced)
    assert model.work
    return model


def test_merges_across_warps_are_the_direct_computation_on_random_candidates(lse_model):
    rng = np.random.default_rng(11)
    split_seen = unsplit_seen = False
    for _ in range(200):
        ways = rng.choice([1.0, 2.0, 32.0, 64.0, 256.0, 1024.0], size=(1, 1, 3)) \
            if rng.random() < 0.6 else rng.choice([1.0, 8.0, 32.0], size=(1, 1, 3))
        # (streaming r, a site's merges over the split c run at each of r's positions)
        stream = [None, ("c", rng.choice([64.0, 512.0, 4096.0], size=(1, 2, 1))),
                  ("r", rng.choice([1.0, 4.0], size=(1, 2, 1)))][int(rng.integers(3))]
        choice = Choices((("r", rng.choice([1.0, 2.0, 7.0], size=(2, 1, 1))),), stream,
                         (("r", np.ones((2, 1, 1))),), (("c", ways),))
        sizes = {"r": float(rng.choice([7, 130])), "c": float(rng.choice([5001, 4096, 77]))}
        threads = ways * rng.choice([1.0, 2.0], size=(2, 1, 1))
        for again in (False, True):
            if again:           # the same dict changed in place: the kept sites are stale
                sizes["r"], sizes["c"] = sizes["r"] + 1, sizes["c"] + 1
            want = _direct_across(lse_model, choice, sizes, threads)
            got = (across_warps.exchange_bytes(lse_model, choice, sizes, threads),
                   across_warps.instructions(lse_model, choice, sizes),
                   across_warps.cycles(lse_model, choice, sizes))
            for g, w in zip(got, want):
                np.testing.assert_array_equal(np.broadcast_to(g, np.shape(w)), w)
        split_seen |= bool(np.any(ways > 32))
        unsplit_seen |= not np.any(ways > 32)
    assert split_seen and unsplit_seen


def test_multiple_of_is_np_mod_on_random_values():
    """choices.multiple_of (issue_simt's copy widths) is np.mod(x, w) == 0: whole sizes and
    tiles near and past 2^31, halves, arrays and numbers, powers of two and not."""
    from napkin.compiler.choices import multiple_of
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.integers(0, 2**12, 400), rng.integers(2**31 - 64, 2**31 + 64, 100),
                        rng.integers(0, 2**40, 100)]).astype(float)
    x = np.concatenate([x, x + 0.5, x * 3]).reshape(4, -1, 1)
    for w in (1, 2, 4, 8, 16, 3, 6):
        np.testing.assert_array_equal(multiple_of(x, w), np.mod(x, w) == 0)
        for v in x.ravel()[::97]:
            assert bool(multiple_of(float(v), w)) == (float(v) % w == 0)
