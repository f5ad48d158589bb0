"""A kernel whose blocks fill a sliver of the GPU prices splits of shorter reductions
(splitting.SPARSE): attention at a few query rows a head splits its keys across blocks
(FlashDecoding's partials on the tensor cores and a merge), where it ran 8 blocks."""

from __future__ import annotations

import napkin
from napkin.compiler.plan import plan

SMALL = {"b": 1, "h": 8, "x": 2048}


def test_a_few_query_rows_split_the_keys_across_blocks():
    """At q = 16 the unsplit plans ran 8 blocks (19 us predicted, h100: above q = 32's 14
    us); split, the keys' partials fill the GPU and the prediction falls to q = 32's or
    below, so the predicted time no longer falls as the queries grow from 16 to 32. The
    library's default sizes fill the GPU and stay unsplit (tests/compiler/data/plans.json
    holds them)."""
    d = napkin.load("attention")
    p16 = plan(d, "h100", {**SMALL, "q": 16})
    assert p16.split is not None and p16.split.axis == "x" and p16.split.parts >= 4
    assert p16.kernels[0].schedule.engine == "attention"          # the partials: FA-2
    assert p16.time < 10e-6
    p32 = plan(d, "h100", {**SMALL, "q": 32})
    assert p16.time <= p32.time * 1.02
    for q in (64, 128):
        assert plan(d, "h100", {**SMALL, "q": q}).time >= p16.time * 0.98
    assert plan(d, "h100", {}).split is None


def test_fewer_query_rows_are_never_predicted_slower():
    """Below a fragment's 16 rows (q = 1 ... 8) the plans split the keys too (their outputs
    are few: splitting.FEW_OUTPUTS), and a tile larger than its axis is one block, not a
    fraction of one (cost.py, `launched`: q = 1's partials counted 32 blocks of 512, 24% of
    the GPU busy): the predicted time grows with the queries (7.5 us at q = 1 to 7.8 at q =
    16; unsplit, q = 4 and 8 were predicted at 11.6 and 13.7 us, h100, model figures)."""
    d = napkin.load("attention")
    times = []
    for q in (1, 2, 4, 8, 16):
        p = plan(d, "h100", {**SMALL, "q": q})
        assert p.split is not None and p.split.axis == "x", q
        times.append(p.time)
    assert times == sorted(times), times
