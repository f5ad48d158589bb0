"""Planning skips work whose answer is already known, and plans the same: a tile search whose
candidates' footprints cannot fit stops before the compute terms (cost.evaluate's
`fitting`), recomputation stops costing a layout once the launches left reach its bound
(recompute._floor), a kernel's boundary reason is made when explain first reads it
(kernels.Reason), and a kernel's models of every streamed axis share what no axis changes
(model_memo.axis_free). Each is checked against the direct computation."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import boundaries, fuse, kernel_plan, model_memo, recompute, search
from napkin.compiler.cost import LAUNCH_SECONDS, evaluate
from napkin.compiler.kernels import Reason
from napkin.compiler.model import kernel_model
from napkin.compiler.columns import columns
from napkin.compiler.pick import fits
from napkin.compiler.plan import plan
from napkin.compiler import target as targets

# a softmax's rows at a width the registers hold whole or not: unstreamed, the wide rows fit
# no tiling; streamed, every width does
SOFTMAX = """axis r, c
in X[r c]: f32
Y[r c] = softmax[c](X) * 2
out Y: f32
"""


def _forget():
    kernel_plan._FOUND.clear()
    model_memo._MODELS.clear()


def _both(model, cols, target, sizes, quick=False):
    """(the full evaluation's `fits` per candidate, evaluate(fitting=True), the full costs,
    the candidates' shape) of the search's candidate set."""
    candidates = search._candidate_set(model, target, sizes, {}, False, quick)[0]
    full = evaluate(model, cols, candidates, sizes, target)
    cut = evaluate(model, cols, candidates, sizes, target, fitting=True)
    return np.any(fits(full)), cut, full, candidates.shape


@pytest.mark.parametrize("tname", ["h100", "a100", "two-level"])
def test_a_search_stops_where_no_footprint_fits(tname):
    """evaluate(fitting=True) is None exactly where no candidate of the set fits (the full
    evaluation's `fits`), else the full evaluation's costs: at the widest rows an unstreamed
    softmax fits (its candidates' footprints at the capacity) and one wider, streamed too."""
    target = targets.load(tname)
    g = napkin.load(SOFTMAX).ir
    (k,) = fuse.unfused_kernels(g)
    whole, streamed = (kernel_model(g, k, axis) for axis in (None, "c"))
    low, high = 1, 1 << 24          # the widest rows the unstreamed model fits: in [low, high)
    while high - low > 1:
        mid = (low + high) // 2
        fit = _both(whole, columns(g, whole), target, {"r": 4096, "c": mid})[0]
        low, high = (mid, high) if fit else (low, mid)
    assert 1 < low < 1 << 23
    seen = set()
    for model in (whole, streamed):
        for width in (low, high, 37):
            for quick in (False, True):
                any_fits, cut, full, shape = _both(model, columns(g, model), target,
                                                   {"r": 4096, "c": width}, quick)
                seen.add(bool(any_fits))
                if not any_fits:
                    assert cut is None, (width, model.streaming.axis)
                    continue
                assert cut is not None, (width, model.streaming.axis)
                assert np.array_equal(np.broadcast_to(cut.time, shape),
                                      np.broadcast_to(full.time, shape))
                for a, b in zip(cut.levels, full.levels):
                    assert np.array_equal(a.M, b.M) and np.array_equal(a.capacity, b.capacity)
    assert seen == {True, False}


@pytest.mark.parametrize("name, shape", [
    ("mlp", {"t": 4096, "m": 4096, "f": 16384, "o": 4096}), ("layernorm", {"r": 4096, "c": 1 << 17}),
    ("attention", {"b": 1, "h": 2, "q": 130, "x": 77})])
def test_every_estimate_takes_at_least_the_launch_floor(monkeypatch, name, shape):
    """recompute._floor is a lower bound of every estimate recomputation adds (_total_below
    prunes on it), and the plan is the one planned without the floor."""
    seen = []
    real = recompute._time

    def spy(planner, k):
        t = real(planner, k)
        seen.append((t, recompute._floor(planner)))
        return t
    monkeypatch.setattr(recompute, "_time", spy)
    _forget()
    pruned = plan(napkin.load(name), "h100", shape)
    assert seen and all(t >= floor for t, floor in seen)
    assert all(floor == LAUNCH_SECONDS for _, floor in seen)
    monkeypatch.setattr(recompute, "_floor", lambda planner: 0.0)
    _forget()
    direct = plan(napkin.load(name), "h100", shape)
    assert [(kp.kernel, kp.choice, kp.cost.time) for kp in pruned.kernels] == \
        [(kp.kernel, kp.choice, kp.cost.time) for kp in direct.kernels]


def test_a_boundary_reason_is_made_when_read(monkeypatch):
    """Planning makes no boundary reason (boundaries._reasons plans fused neighbours: fusion's
    discarded layouts never need it); reading a kernel's reason makes it, once."""
    calls = []
    real = boundaries._reasons
    monkeypatch.setattr(boundaries, "_reasons", lambda *a: calls.append(a) or real(*a))
    _forget()
    p = plan(napkin.load("mlp"), "h100", {"t": 4096, "m": 4096, "f": 16384, "o": 4096})
    assert len(p.kernels) == 2 and not calls
    reason = p.kernels[1].kernel.reason
    assert reason.startswith("H goes through global memory") and "recomputes" in reason
    made = len(calls)
    assert made >= 1
    assert p.kernels[1].kernel.reason == reason and len(calls) == made


def test_a_reason_compares_by_its_text_and_hashes_nothing():
    """Kernels equal but for their reasons compare by the reasons' text; hashing a kernel
    never makes its reason."""
    made = []

    def reason(text):
        return Reason(lambda: made.append(text) or text)
    g = napkin.load("mlp").ir
    k = fuse.unfused_kernels(g)[0]
    a, b, c = (fuse.replace(k, why=reason(t)) for t in ("x", "x", "y"))
    assert hash(a) == hash(b) == hash(c) and not made
    assert a == b and a != c and a == fuse.replace(k, why="x")
    assert a.reason == "x" and sorted(made) == ["x", "x", "y"]
    import copy
    import pickle
    assert pickle.loads(pickle.dumps(c)) == copy.deepcopy(c) == c and c.reason == "y"


def test_a_models_axis_free_parts_are_shared_by_its_kernels_models_only():
    """model_memo keeps what no streamed axis changes (axis_free) per kernel and hands it to
    each axis's model: the models equal kernel_model's own, also for a kernel with the same
    nodes and other stores (an overlapping kernel's)."""
    g = napkin.grad(napkin.load("attention")).ir
    from napkin.compiler.kernels import fused_kernel, is_free
    from napkin.compiler.model_memo import _shared_model
    nodes = {n for k in fuse.unfused_kernels(g) for n in k.nodes}
    whole = fused_kernel(g, "k?", nodes)
    inner = [n for n in whole.nodes if n not in whole.stores and not is_free(g, n)]
    more = fused_kernel(g, "k?", nodes, needed=set(whole.stores) | set(inner[-3:]))
    assert more.nodes == whole.nodes and more.stores != whole.stores
    token = ("test", id(g))
    checked = 0
    for k in (whole, more, *fuse.unfused_kernels(g)):
        for axis in (None, *k.reduced(g)):
            model, _ = _shared_model(g, token, k, axis)
            assert model == kernel_model(g, k, axis), (k.stores, axis)
            checked += 1
    assert checked > 10
