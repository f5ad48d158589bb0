"""One cost model for one plan and for a candidate set: `cost.evaluate` on a `Choices`
(NumPy arrays, one entry per candidate) gives every candidate the cost the same call gives it
as a `Choice` alone, and the searches built on that keep the recorded plans
(tests/compiler/data/plans.json, written by benchmarks/record_plans.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from ..sampling import sampled

import napkin
from napkin.compiler import chain, flash, search, tensorcore
from napkin.compiler.columns import columns
from napkin.compiler.cost import Choice, Choices, Cost, evaluate
from napkin.compiler.pick import fits
from napkin.compiler.model import kernel_model
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("two-level", "a100", "h100", "h200", "hopper-toy")
SMALL = (77, 130)          # odd sizes: partial tiles, chunks and sectors


@pytest.fixture(scope="module")
def recording():
    spec = importlib.util.spec_from_file_location("napkin_record_plans",
                                                  ROOT / "benchmarks" / "record_plans.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def small_shape(d) -> dict:
    reps = sorted({info.rep for info in d.ir.graph["axes"].values() if info.size is None})
    return {a: SMALL[i % 2] for i, a in enumerate(reps)}


def models(name: str, tname: str):
    """(label, graph, kernel, model, columns, sizes, target) of every kernel of a library plan
    at small sizes, once per axis it could stream (None included)."""
    d = napkin.load(name)
    p = plan(d, tname, small_shape(d))
    for kp in p.kernels:
        for axis in (None,) + tuple(kp.kernel.reduced(p.graph)):
            model = kernel_model(p.graph, kp.kernel, axis)
            yield (f"{kp.kernel.name} streaming {axis}", p.graph, kp.kernel, model,
                   columns(p.graph, model), p.sizes, p.target)


# every diagram on three targets (two levels; tensor cores; the toy's registers), and the
# searches on the other two
CASES = [(name, tname) for name in library_names() for tname in ("two-level", "h100", "hopper-toy")]
SEARCHES = [(name, ("a100", "h200")[i % 2]) for i, name in enumerate(library_names())]


def simt_candidates(model, sizes, target, rng, n: int) -> Choices:
    """Random SIMT candidates: group and thread tiles, chunks, splits of any reduced axis (or
    none), and sometimes a thread-level stream of a reduced axis."""
    def pick(values):
        return rng.choice(np.asarray(values, dtype=float), n)
    group = tuple((a, pick(search.tiles(sizes[a]))) for a in model.woven)
    axis = model.streaming.axis
    stream = (axis, pick(search.chunks(sizes[axis], fine=True))) if axis else None
    thread, split, inner = (), (), None
    if len(target.levels) > 2:
        thread = tuple((a, np.minimum(pick(search.THREAD_TILES), g)) for a, g in group)
        if model.reduced:
            which = rng.integers(-1, len(model.reduced), n)
            ways = pick(search.SPLITS)
            split = tuple((a, np.where(which == i, ways, 1.0))
                          for i, a in enumerate(model.reduced))
            if rng.random() < 0.3:
                inner = (str(rng.choice(model.reduced)), pick((1, 2, 4)))
    return Choices(group, stream, thread, split, inner)


def tensor_core_candidates(model, sizes, site, rng, n: int) -> Choices:
    """Random tensor-core tilings of a product, an attention or a chain site, as its search
    builds them."""
    ones = tuple((a, 1) for a in site.batch)
    if isinstance(site, (flash.FlashSite, chain.ChainSite)):     # (a chain: FlashAttention's rows)
        bm, wm, chunk = flash.TILINGS[rng.integers(0, len(flash.TILINGS), n)].T.astype(float)
        return Choices(((site.row, bm),) + ones, (site.red, chunk), ((site.row, bm / wm),) + ones,
                       (), None, ((site.row, wm),))
    rows = tensorcore.TILINGS[rng.integers(0, len(tensorcore.TILINGS), n)]
    bm, bn, bk, wm, wn = rows.T.astype(float)
    return Choices(((site.row, bm), (site.col, bn)) + ones, (site.red, bk),
                   ((site.row, bm / wm), (site.col, bn / wn)) + ones, (), None,
                   ((site.row, wm), (site.col, wn)))


def close(a, b) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)


def differences(one: Cost, alone: Cost) -> list[str]:
    """Where two costs of one choice disagree (empty: they agree)."""
    out = []
    for x, y in zip(one.levels, alone.levels):
        for f in ("capacity", "M", "H", "units", "time"):
            if not close(getattr(x, f), getattr(y, f)):
                out.append(f"{x.name} {f}: {getattr(x, f)} vs {getattr(y, f)}")
    if one.flops.keys() != alone.flops.keys() or \
            not all(close(one.flops[k], alone.flops[k]) for k in one.flops):
        out.append(f"flops: {one.flops} vs {alone.flops}")
    for f in ("compute_time", "time", "utilization", "threads"):
        if not close(getattr(one, f), getattr(alone, f)):
            out.append(f"{f}: {getattr(one, f)} vs {getattr(alone, f)}")
    if one.bound != alone.bound:
        out.append(f"bound: {one.bound} vs {alone.bound}")
    if bool(fits(one)) != bool(fits(alone)):
        out.append("fits")
    return out


@pytest.mark.parametrize("name, tname", sampled(CASES))
def test_a_candidate_set_costs_each_candidate_as_its_choice_alone(name, tname):
    rng = np.random.default_rng(CASES.index((name, tname)))
    for label, g, kernel, model, cols, sizes, target in models(name, tname):
        sets = [simt_candidates(model, sizes, target, rng, 48)]
        site = tensorcore.site(g, kernel, model, target, sizes)
        if site is not None:
            sets.append(tensor_core_candidates(model, sizes, site, rng, 48))
        for candidates in sets:
            cost = evaluate(model, cols, candidates, sizes, target)
            assert candidates.shape == (48,)
            assert np.broadcast_shapes(np.shape(cost.time), candidates.shape) == (48,)
            for i in rng.choice(48, 6, replace=False):
                alone = evaluate(model, cols, candidates.at(i), sizes, target)
                assert differences(cost.at(i, candidates.shape), alone) == [], \
                    (label, candidates.at(i))


@pytest.mark.parametrize("name, tname", SEARCHES)
def test_a_search_records_the_cost_of_its_choice_alone(name, tname):
    """What the searches return (read off the candidate set) is the scalar cost of the Choice
    they record (whole axes dropped, tiles sorted)."""
    for label, g, kernel, model, cols, sizes, target in models(name, tname):
        found = [search.search(model, cols, target, sizes, quick=quick) for quick in (False, True)]
        site = tensorcore.site(g, kernel, model, target, sizes)
        if site is not None:
            found.append(tensorcore.search_site(model, cols, target, sizes, site, {}))
        for choice, cost in filter(None, found):
            assert isinstance(choice, Choice) and all(type(v) is int for _, v in choice.group)
            assert differences(cost, evaluate(model, cols, choice, sizes, target)) == [], label


def test_a_choice_is_a_candidate_set_of_one():
    choice = plan(napkin.load("attention"), "h100", {}).kernels[0].choice
    assert Choices.of(choice).at(0) == choice and len(Choices.of(choice)) == 1
    two = Choices((("q", np.array([16.0, 64.0])),), ("x", 32), split=(("x", np.array([1, 4])),))
    assert two.at(0) == Choice((("q", 16),), ("x", 32)) and two.at(1).split == ("x", 4)


def test_the_recorded_plans_are_kept(recording):
    """Every library diagram at each recorded shape, on one target in turn (all five over the
    diagrams); the whole recording is `python benchmarks/record_plans.py`."""
    recorded = json.loads(recording.RECORDING.read_text())
    cases = [(name, TARGETS[(i + j) % len(TARGETS)], shape)
             for i, name in enumerate(library_names())
             for j, shape in enumerate(("default", "large", "small"))]
    for case in cases:
        assert recording.differences(recorded[recording.key(*case)],
                                     recording.record_one(*case)) == [], case


def test_near_ties_go_to_the_tiling_moving_fewer_bytes():
    """pick.fastest: candidates within NEAR of the fastest predicted time are a tie that the
    smaller H (global memory's level) wins; a candidate further away never wins on bytes; a
    candidate that does not fit never wins; exact ties in time and bytes go to the keys."""
    from types import SimpleNamespace
    from napkin.compiler.pick import NEAR, fastest

    def cost(times, moved):
        return SimpleNamespace(time=np.array(times, dtype=float), levels=(
            None, SimpleNamespace(H=np.array(moved, dtype=float))))
    ok = np.ones(4, dtype=bool)
    keys = (np.array([3.0, 2.0, 1.0, 0.0]),)
    inside = 1 + NEAR / 2
    # the second is within NEAR and moves half the bytes: it wins
    assert fastest(cost([1.0, inside, 2.0, 3.0], [8, 4, 1, 1]), ok, keys, (4,)) == 1
    # ... not when it is further than NEAR from the fastest
    assert fastest(cost([1.0, 1 + 2 * NEAR, 2.0, 3.0], [8, 4, 1, 1]), ok, keys, (4,)) == 0
    # ... nor when it does not fit
    assert fastest(cost([1.0, inside, 2.0, 3.0], [8, 4, 1, 1]), ok & [1, 0, 1, 1], keys,
                   (4,)) == 0
    # equal bytes among the near ones: the faster; equal time and bytes: the keys
    assert fastest(cost([inside, 1.0, 2.0, 3.0], [4, 4, 1, 1]), ok, keys, (4,)) == 1
    assert fastest(cost([1.0, 1.0, 1.0, 3.0], [4, 4, 4, 1]), ok, keys, (4,)) == 2
    # nothing fits: None
    assert fastest(cost([1.0, 1.0, 1.0, 1.0], [1, 1, 1, 1]), ~ok, keys, (4,)) is None
