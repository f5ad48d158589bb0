"""The schedule interpreter against the reference, on random plans and shapes with tails.

Every library diagram, fused and unfused, with random group sizes, streamed
axes, chunks and thread splits (1, T-1, T+1 and primes next to tiles T): 3 random plans
per library diagram in CI, 12 in the thorough tier. A wrong rescale, a dropped tail or a
bad merge shows up as a difference far above float64 rounding.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.cost import Choice
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.diagrams.sources import library_names
from napkin.runtime.interpret import interpret
from napkin.runtime.reference import evaluate

# 22 library diagrams: 3 random plans each in the default run, 6 x NAPKIN_FUZZ_SCALE in the
# thorough tier (NAPKIN_FUZZ_SCALE >= 2; benchmarks/fuzz.py runs random plans for as long as
# it is given, and tests/fuzz/test_random_plans.py interprets random plans of the library too)
SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))
CASES_PER_DIAGRAM = max(1, int((6 if SCALE >= 2 else 3) * SCALE))


@st.composite
def planned(draw, name):
    d = napkin.load(name)
    tile = draw(st.sampled_from([2, 3, 4, 8]))
    near = [1, tile - 1, tile, tile + 1, 5, 7, 11]
    reps = {a: d.ir.graph["axes"][a].rep for a, s in d.axes.items() if s is None}
    drawn = {r: draw(st.sampled_from([n for n in near if n >= 1])) for r in dict.fromkeys(reps.values())}
    shape = {a: drawn[r] for a, r in reps.items()}      # one size per class (varlen: q ~ x)
    small = {}
    if "d" in d.axes:                    # keep attention's head size small
        small["d"] = draw(st.sampled_from([3, 8, 9]))
    if d.axes.get("x"):                  # and paged_attention's keys (fixed: no input has them)
        small["x"] = draw(st.sampled_from(near))
    if small:
        d = napkin.load(name, **small)
    fused = draw(st.booleans())
    # (the choices drawn are the CUDA cores' own: heads this small, padded in shared memory,
    # would otherwise go to the tensor cores, whose models name packed rows: headpad.py)
    p = plan(d, "h100", shape, fusion=fused, engine="cuda-cores")
    choices = []
    budget = 48
    for kp in p.kernels:
        woven, reduced = kp.model.woven, kp.model.reduced
        group = []
        for a in woven:
            size = p.sizes[a]
            g = draw(st.sampled_from([1, 2, 3, tile, size, size + 1]))
            while -(-size // g) > 4 and budget < 8:
                g *= 2
            budget = max(1, budget // max(1, -(-size // g)))
            group.append((a, g))
        stream = None
        axis = draw(st.sampled_from([None] + list(reduced)))
        if axis is not None:
            stream = (axis, draw(st.sampled_from([1, 2, 3, tile, p.sizes[axis] + 2])))
        split = None
        if reduced and draw(st.booleans()):
            # (lanes of a split merge by warp shuffles: a power of two, as the Schedule checks)
            split = (draw(st.sampled_from(list(reduced))), draw(st.sampled_from([2, 4, 8])))
        # one thread per position: a block holds at most 1024 threads (the Schedule checks it)
        ways = split[1] if split else 1
        tiles = dict(group)
        while ways * int(np.prod(list(tiles.values()) or [1])) > 1024:
            a = max(tiles, key=tiles.get)
            tiles[a] = max(1, tiles[a] // 2)
        choices.append(Choice(tuple((a, tiles[a]) for a, _ in group), stream, (), split))
    return d, with_choices(p, choices), shape, draw(st.integers(0, 2**16))


@pytest.mark.parametrize("name", library_names())
def test_random_plans_match_the_reference(name):
    @settings(max_examples=CASES_PER_DIAGRAM, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(planned(name))
    def check(case):
        d, p, shape, seed = case
        inputs = random_inputs(d, shape, seed)
        got = interpret(p, inputs)
        ref = evaluate(d, inputs)
        for key, expected in ref.items():
            scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
            err = float(np.max(np.abs(got[key] - expected), initial=0.0))
            assert err <= 1e-9 * scale, (key, err, [k.choice for k in p.kernels])

    check()


def test_interpret_backend_matches_reference_at_odd_shapes(rng):
    d = napkin.load("causal_attention")
    Q, K, V = (rng.standard_normal(s).astype(np.float16)
               for s in ((2, 3, 37, 64), (2, 3, 50, 64), (2, 3, 50, 64)))
    (a,) = napkin.run(d, Q, K, V, backend="interpret")
    (b,) = napkin.run(d, Q, K, V)
    np.testing.assert_array_equal(a, b)


def test_fully_masked_rows_stream_to_zero(rng):
    d = napkin.load("axis b, h, q, x\naxis d = 8\nin Q[b h q d]: f32, K[b h x d]: f32, "
                    "V[b h x d]: f32\nS[b h q x] = where(q >= 3, Q * K, -inf)\n"
                    "P[b h q x] = softmax[x](S)\nO[b h q d] = P * V\nout O: f32")
    shape = {"b": 1, "h": 2, "q": 7, "x": 13}
    inputs = random_inputs(d, shape, 3)
    p = plan(d, "h100", shape)
    assert len(p.kernels) == 1
    out = interpret(with_choices(p, [Choice((("q", 2),), ("x", 4), (), ("x", 2))]), inputs)["O"]
    assert np.all(out[:, :, :3] == 0) and not np.isnan(out).any()
    np.testing.assert_allclose(out, evaluate(d, inputs)["O"], rtol=1e-12, atol=1e-12)


def test_standalone_softmax_takes_two_passes():
    d = napkin.load("softmax")
    p = plan(d, "h100", {"r": 5, "c": 9})
    kp = with_choices(p, [Choice((("r", 2),), ("c", 4))]).kernels[0]
    assert kp.model.streaming.passes == 2
