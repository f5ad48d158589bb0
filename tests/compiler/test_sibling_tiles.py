"""Sibling products tiled together to share one launch (compiler/sibling_tiles.py): at t=4096
m=2048 Q's best tiling alone has 256 threads a block and K's and V's 128; K and V tiled at
256 share Q's launch, predicted faster than the plan of each tiled alone (model, h100),
recorded on the launch and said by explain; emulated at odd sizes against float64; and
where tiling them again is predicted slower (t=16384 k=128) they stay as tiled alone."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.compiler import sibling_tiles, siblings
from napkin.compiler.arrays import array_name
from napkin.compiler.pick import NEAR
from napkin.compiler.plan import plan
from napkin.explain import render_text, report
from napkin.pipeline import run_plan

from ..runtime.close import assert_close
from ..runtime.test_sibling_launches import THREE
from .test_siblings import SCALE, _member


def _time(p) -> float:
    return sum(float(kp.cost.time) for kp in p.kernels)


def test_projections_tiled_as_q_share_one_launch_faster_than_each_tiled_alone(monkeypatch):
    p = plan(napkin.load(THREE), "h100", SCALE)
    k, v, q = _member(p, "K"), _member(p, "V"), _member(p, "Q")
    (la,) = p.launches
    assert sorted(la.members) == sorted([q, k, v]) and la.shared == "X"
    assert {kp.schedule.threads for kp in p.kernels} == {256}
    # K and V tiled at Q's 256 threads (their best alone: 128), 64 blocks each of 256 x 128
    assert sorted(la.retiled) == sorted([(k, 128), (v, 128)])
    assert la.blocks[la.members.index(k)] == la.blocks[la.members.index(v)] == 64
    # the plan each kernel's own search gives (nothing tiled again: K and V share a launch
    # of 128 threads, Q apart), what the launch beat: 128.2 us against 114.9 us (model)
    monkeypatch.setattr(sibling_tiles, "TRIALS", 0)
    alone = plan(napkin.load(THREE), "h100", SCALE)
    assert [kp.schedule.threads for kp in alone.kernels] == [256 if i == q else 128
                                                             for i in range(3)]
    assert _time(alone) == pytest.approx(la.alone, rel=1e-12) == pytest.approx(128.2e-6, abs=1e-7)
    assert _time(p) == pytest.approx(la.together, rel=1e-12) == pytest.approx(114.9e-6, abs=1e-7)
    assert la.together < la.alone * (1 - NEAR)
    said = render_text(report(p, compare=False))
    assert said.count("tiled as kernel k0 (256 threads a block, not its own best of 128) to "
                      "share the launch: predicted 115 us for the launch against 128 us for "
                      "its kernels each tiled alone") == 2, said


def test_projections_tiled_to_share_a_launch_emulated_at_odd_sizes(rng):
    """The plan tiled jointly at scale (256 x 128 tiles of K and V in Q's 256-thread grid)
    run at t=37 m=65: partial tiles of every member, one kernel, against float64."""
    p = plan(napkin.load(THREE), "h100", SCALE)
    assert p.launches[0].retiled and len(lower(p).kernels) == 1
    sizes = {"t": 37, "m": 65, "n": 48, "k": 24}
    x = rng.standard_normal((37, 65)).astype(np.float16)
    w = {name: (rng.standard_normal((65, c)) * 0.2).astype(np.float16)
         for name, c in (("Wq", 48), ("Wk", 24), ("Wv", 24))}
    out = run_plan(p, {"X": x, **w}, sizes)
    for o, name in (("Q", "Wq"), ("K", "Wk"), ("V", "Wv")):
        assert_close(out[o], x.astype(np.float64) @ w[name].astype(np.float64), "f16", slack=4.0)


def test_siblings_stay_as_tiled_alone_where_tiling_them_again_is_slower():
    """t=16384 k=128: K and V (128 threads, one launch) tiled at Q's 256 would take
    370.8 us against 369.8 us (model, h100), Q at 128 469.2 us: neither is taken."""
    shape = {**SCALE, "t": 16384, "k": 128}
    p = plan(napkin.load(THREE), "h100", shape)
    k, v, q = _member(p, "K"), _member(p, "V"), _member(p, "Q")
    (la,) = p.launches
    assert sorted(la.members) == sorted([k, v]) and not la.retiled and la.alone == 0.0
    assert [kp.schedule.threads for kp in p.kernels] == [256 if i == q else 128 for i in range(3)]
    own = siblings.unshared(p.kernels, p.launches)
    found = {o.threads: o for o in sibling_tiles.options(p.graph, own, p.sizes, p.target)}
    assert sorted(found) == list(sibling_tiles.THREADS) == [32, 64, 128, 256]
    assert found[256].retiled == tuple(sorted([k, v])) and found[128].retiled == (q,)
    assert found[32].retiled and found[64].retiled      # (any member: its best there)
    for o in found.values():
        assert o.alone == pytest.approx(_time(p), rel=1e-12)
        assert o.time > o.alone
    assert found[256].time == pytest.approx(370.8e-6, abs=1e-7)
    assert found[256].alone == pytest.approx(369.8e-6, abs=1e-7)
    assert found[128].time == pytest.approx(469.2e-6, abs=1e-7)


def test_siblings_of_one_thread_count_are_tiled_at_another_where_the_launch_is_faster():
    """t=512 m=n=k=2048: each projection's own best tiling has 64 threads a block (a small
    grid alone fills the GPU with small blocks); the three share one launch at 64 threads,
    54.3 us, or at 128 threads (64 blocks each, 192 in one wave): 36.1 us (model, h100).
    Before, a set of one thread count was never tiled at another."""
    shape = {"t": 512, "m": 2048, "n": 2048, "k": 2048}
    p = plan(napkin.load(THREE), "h100", shape)
    (la,) = p.launches
    assert sorted(la.members) == [0, 1, 2] and la.retiled == ((0, 64), (1, 64), (2, 64))
    assert {kp.schedule.threads for kp in p.kernels} == {128}
    assert _time(p) == pytest.approx(la.together, rel=1e-12) == pytest.approx(36.1e-6, abs=1e-7)
    assert la.alone == pytest.approx(54.3e-6, abs=1e-7)
    said = render_text(report(p, compare=False))
    assert said.count("tiled (128 threads a block, not its own best of 64) to share the "
                      "launch: predicted 36.1 us for the launch against 54.3 us") == 3, said


def test_a_joint_tiling_gaining_less_than_the_model_resolves_is_not_taken(monkeypatch):
    """The whole is kept only where the plan is faster than as tiled alone by more than
    pick.NEAR: at a margin of 20% the t=4096 plan's 10% (128.2 -> 114.9 us) is not taken."""
    monkeypatch.setattr(sibling_tiles, "NEAR", 0.2)
    p = plan(napkin.load(THREE), "h100", SCALE)
    (la,) = p.launches
    assert not la.retiled and len(la.members) == 2
    assert _time(p) == pytest.approx(128.2e-6, abs=1e-7)


@pytest.mark.thorough
def test_the_weight_gradients_of_projected_attention_share_a_launch_tiled_in_turn():
    """Projected self-attention's gradient at t=s=4096 m=2048 h=16 (5 CPU-s of planning):
    dWq, reading dQ as dX does, tiled at dX's 256 threads (a step of 0.2%, below NEAR),
    then dWk and dWv, reading X as dWq does, tiled as it: one launch of the three, the
    plan 980.9 -> 957.2 us (model, h100); 957.1 us since sets of one thread count are
    tried at the others too."""
    from .self_attention import VARIANTS
    d = napkin.grad(napkin.load(VARIANTS["full_proj"]))
    p = plan(d, "h100", {"t": 4096, "s": 4096, "m": 2048, "h": 16})
    (la,) = p.launches
    stored = {array_name(p.graph, u) for i in la.members for u in p.kernels[i].kernel.stores}
    assert stored == {"dWq", "dWk", "dWv"}
    assert sorted(t for _, t in la.retiled) == [128, 128, 128]
    assert {p.kernels[i].schedule.threads for i in la.members} == {256}
    assert _time(p) == pytest.approx(957.1e-6, abs=1e-7)
    assert la.alone > la.together


def test_a_sites_tilings_ranked_at_each_thread_count_are_priced_once(monkeypatch):
    """tiling_rank.ranked at each thread count (sibling_tiles.tiled_at asks at four) prices
    the site's candidate set once and gives what pricing it again gives: the same tilings
    and costs, fastest first, each of the threads asked (fails where a ranking is of another
    count's blocks, or where the memo keyed on too little hands another site's set)."""
    from napkin.compiler import tiling_rank
    p = plan(napkin.load(THREE), "h100", SCALE)
    kp = p.kernels[_member(p, "K")]
    args = (kp.model, kp.columns, p.target, p.sizes, kp.schedule.site)
    direct = {t: _ranked_fresh(tiling_rank, args, t) for t in sibling_tiles.THREADS}
    calls = []
    price = tiling_rank._price
    monkeypatch.setattr(tiling_rank, "_price", lambda *a: calls.append(a) or price(*a))
    tiling_rank._PRICED.clear()
    for t in sibling_tiles.THREADS:
        got = tiling_rank.ranked(*args, sibling_tiles.RANKED, threads=t)
        assert got == direct[t] and all(float(c.threads) == t for _, c in got)
    assert len(calls) == 1 and any(direct.values())
    # another site (Q's, its own model) is priced on its own
    q = p.kernels[_member(p, "Q")]
    other = tiling_rank.ranked(q.model, q.columns, p.target, p.sizes, q.schedule.site, 4)
    assert len(calls) == 2 and other == _ranked_fresh(
        tiling_rank, (q.model, q.columns, p.target, p.sizes, q.schedule.site), None, 4)


def _ranked_fresh(tiling_rank, args, threads, count=sibling_tiles.RANKED):
    """tiling_rank.ranked with nothing memoised (the memo emptied before and after)."""
    tiling_rank._PRICED.clear()
    try:
        return tiling_rank.ranked(*args, count, threads=threads)
    finally:
        tiling_rank._PRICED.clear()
