"""Near ties broken on issue slots (compiler/pick.py's SLOTS): among candidates predicted
within NEAR of the fastest that move the same bytes, one issuing at most 1/SLOTS of the
fastest's issue slots wins. softmax at r = 130, c = 77 on h100: 32 lanes over c predicted
3.290 us against 3.287 us over 64 lanes, issue slots 0.071 against 0.138 us (model; its
SASS: 0.073 against 0.149 us, static), and 32 lanes are kept; the plan runs as the float64
reference says (CPU emulator, odd sizes)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import napkin
from napkin.compiler.pick import NEAR, SLOTS, fastest
from napkin.compiler.plan import plan

SMALL = {"r": 130, "c": 77}


def _cost(times, moved, slots):
    return SimpleNamespace(time=np.array(times, dtype=float),
                           levels=(None, SimpleNamespace(H=np.array(moved, dtype=float))),
                           compute_parts=(("tensor", 0), ("issue", np.array(slots, dtype=float))))


def test_a_near_tie_goes_to_clearly_fewer_issue_slots():
    ok = np.ones(4, dtype=bool)
    keys = (np.arange(4.0),)
    inside = 1 + NEAR / 2
    # the second is within NEAR, moves the same bytes, and issues half the slots: it wins
    assert fastest(_cost([1.0, inside, 2.0, 3.0], [4, 4, 4, 4], [2, 1, 1, 1]), ok, keys,
                   (4,)) == 1
    # ... not with a few fewer slots (less than SLOTS fewer)
    assert fastest(_cost([1.0, inside, 2.0, 3.0], [4, 4, 4, 4], [2, 2 / SLOTS + 0.01, 1, 1]),
                   ok, keys, (4,)) == 0
    # ... nor further than NEAR from the fastest, nor moving more bytes, nor not fitting
    assert fastest(_cost([1.0, 1 + 2 * NEAR, 2.0, 3.0], [4, 4, 4, 4], [2, 1, 1, 1]), ok, keys,
                   (4,)) == 0
    assert fastest(_cost([1.0, inside, 2.0, 3.0], [4, 5, 4, 4], [2, 1, 1, 1]), ok, keys,
                   (4,)) == 0
    assert fastest(_cost([1.0, inside, 2.0, 3.0], [4, 4, 4, 4], [2, 1, 1, 1]),
                   ok & [1, 0, 1, 1], keys, (4,)) == 0
    # of several with fewer slots, the fastest of them
    assert fastest(_cost([1.0, 1 + NEAR, inside, 3.0], [4, 4, 4, 4], [2, 0.5, 1, 1]), ok,
                   keys, (4,)) == 2


def test_softmax_small_takes_the_lanes_issuing_half(rng, within_budget):
    from napkin.pipeline import run_plan
    d = napkin.load("softmax")
    (kp,) = plan(d, "h100", SMALL).kernels
    (wide,) = plan(d, "h100", SMALL, {"lanes": {"c": 64}}).kernels
    assert kp.choice.split == ("c", 32) and wide.choice.split == ("c", 64)
    assert wide.cost.time < kp.cost.time < wide.cost.time * (1 + NEAR)
    assert kp.cost.levels[1].H == wide.cost.levels[1].H
    slots = [dict(k.cost.compute_parts)["issue"] for k in (kp, wide)]
    assert slots[0] * SLOTS <= slots[1]
    p = plan(d, "h100", SMALL)
    for sizes in ({"r": 37, "c": 77}, {"r": 5, "c": 33}):
        X = (rng.standard_normal((sizes["r"], sizes["c"])) * 4).astype(np.float16)
        within_budget(d, {"X": X}, run_plan(p, {"X": X}, sizes))
