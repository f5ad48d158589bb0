"""The decision to launch sibling products as one grid (compiler/siblings.py), by the model:
taken for independent products reading one array where one launch of the summed blocks is
faster, and not where a product reads another's result, where the block shapes differ, or
where there is no GPU; its price is the kernels' own where nothing is shared; decided again
for a plan rebuilt with other choices (variants.with_choices)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import napkin
from napkin.compiler import sibling_tiles, siblings
from napkin.compiler.cost import LAUNCH_SECONDS
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.pipeline import run_plan

from ..runtime.close import assert_close
from ..runtime.test_sibling_launches import THREE

# H reads Q (Q^T X): it reads X too, but must launch after Q's kernel
DEPENDENT = """axis t, m, n, k
in X[t m]: f16
in Wq[m n]: f16, Wk[m k]: f16
Q[t n] = X * Wq
K[t k] = X * Wk
H[n m] = Q[t n] * X[t m]
out K: f16, H: f16
"""
SCALE = {"t": 4096, "m": 2048, "n": 2048, "k": 512}


def _member(p, stored: str) -> int:
    """The index of the kernel that stores the output `stored`."""
    return next(i for i, kp in enumerate(p.kernels)
                if any(getattr(p.graph.nodes[v]["op"], "name", None) == stored
                       for n in kp.kernel.stores for v in [n, *p.graph.successors(n)]))


def test_independent_products_of_one_block_shape_share_a_launch_at_scale():
    # Q's best tiling has 256 threads a block, K's and V's 128 (one kernel's
    # __launch_bounds__: apart); at t = 16384 K and V tiled at 256 would not be faster
    # (sibling_tiles.py; tests/compiler/test_sibling_tiles.py), so they share a launch of
    # their own, 512 blocks each
    p = plan(napkin.load(THREE), "h100", {**SCALE, "t": 16384, "k": 128})
    (la,) = p.launches
    k, v, q = _member(p, "K"), _member(p, "V"), _member(p, "Q")
    assert set(la.members) == {k, v} and q not in la.members and not la.retiled
    assert p.kernels[q].schedule.threads == 256 and p.kernels[k].schedule.threads == 128
    assert la.shared == "X" and la.waves == 1 and la.blocks == (128, 128)
    # one launch saved at least
    assert la.apart - la.together >= LAUNCH_SECONDS
    # each member's cost is its share: the plan's time is the launch's plus Q's
    assert sum(p.kernels[i].cost.time for i in la.members) == pytest.approx(la.together)
    # X (64 MiB) does not fit in half H100's L2: each member reads it from HBM
    assert la.from_l2 == 0.0
    # at t = 4096 (X: 16 MiB) it does: the members after the first read it from there
    (small,) = plan(napkin.load(THREE), "h100", SCALE).launches
    assert small.from_l2 == 4096 * 2048 * 2 * (len(small.members) - 1)


def test_a_single_kernel_is_priced_as_its_own_launch():
    """price() of one kernel is its cost (cost.py's terms, utilization, first tiles per wave
    and launch): what the model charged apart, it charges together."""
    p = plan(napkin.load(THREE), "h100", SCALE)
    q = siblings.unshared(p.kernels, p.launches)[_member(p, "Q")]     # (its own cost)
    t, waves, _ = siblings.price([q], [siblings.blocks(q, p.sizes)], 0.0, p.target)
    assert t == pytest.approx(float(q.cost.time), rel=1e-9) and waves == 2


def test_a_product_that_reads_a_siblings_result_keeps_its_own_launch():
    p = plan(napkin.load(DEPENDENT), "h100", SCALE)
    h = _member(p, "H")
    assert all(h not in la.members for la in p.launches)
    assert all(kp.schedule.engine == "tensor-core product" for kp in p.kernels)


def test_a_shared_array_larger_than_the_l2_is_read_from_hbm_by_each():
    p = plan(napkin.load(THREE), "h100", {**SCALE, "t": 32768})
    (la,) = p.launches
    assert len(la.members) == 3 and la.from_l2 == 0.0     # X: 128 MiB


def test_no_gpu_no_shared_launch():
    assert plan(napkin.load(THREE), "two-level", SCALE).launches == ()


@pytest.mark.parametrize("blocks", [(128, 128, 256), (1, 263, 5), (264, 264, 1), (1000, 3, 777)])
def test_the_waves_first_tiles_are_the_slowest_members_each(blocks, monkeypatch):
    """price() charges each wave the first-tile wait of the slowest member it holds, counted
    in closed form (a member's waves between its first and last hold only its blocks): the
    per-wave loop it replaced walked 81 million waves for paged_attention's gradient at the
    default sizes (20 CPU-s of planning, 1.9 without). Against that loop on odd block counts."""
    p = plan(napkin.load(THREE), "h100", SCALE)
    kps = [p.kernels[_member(p, name)] for name in ("K", "V", "Q")]
    fills = dict(zip(map(id, kps), (3e-6, 1e-6, 2e-6)))
    monkeypatch.setattr(siblings, "_fill_per_wave", lambda kp, n, target: fills[id(kp)])
    got, _, _ = siblings.price(kps, list(blocks), 0.0, p.target)
    monkeypatch.setattr(siblings, "_fill_per_wave", lambda kp, n, target: 0.0)
    base, _, _ = siblings.price(kps, list(blocks), 0.0, p.target)
    slots = p.target.processors * min(int(kp.cost.blocks_per_sm) for kp in kps)
    wave: dict[int, float] = {}
    start = 0
    for kp, n in zip(kps, blocks):
        for w in range(start // slots, (start + n - 1) // slots + 1):
            wave[w] = max(wave.get(w, 0.0), fills[id(kp)])
        start += n
    assert got - base == pytest.approx(sum(wave.values()), rel=1e-9)


def _renamed_choice(c, old: str, new: str):
    """Choice c with axis `old` called `new` (Q's tiling given to K)."""
    def sub(pairs):
        return tuple((new if a == old else a, s) for a, s in pairs)
    return replace(c, group=sub(c.group), thread=sub(c.thread), warps=sub(c.warps))


def test_a_plan_with_other_choices_decides_its_launches_again(rng):
    """variants.with_choices rebuilds every kernel, then siblings.decide decides the shared
    launches for them: the plan's own choices give the plan's launch (it was lost: each
    product launched alone), with what it recorded of K and V tiled as Q to share it; and V
    given its own best tiling alone (128 threads) leaves the launch of Q and K (256): a
    launch copied from the plan would hold members of two block shapes. The given tilings
    are kept (none is tiled again: sibling_tiles.py)."""
    p = plan(napkin.load(THREE), "h100", SCALE)
    same = with_choices(p, [kp.choice for kp in p.kernels])
    assert same.launches == p.launches and len(p.launches) == 1
    assert same.launches[0].retiled
    assert [kp.cost.time for kp in same.kernels] == pytest.approx([kp.cost.time for kp in p.kernels])
    k, v, q = _member(p, "K"), _member(p, "V"), _member(p, "Q")
    choices = [kp.choice for kp in p.kernels]
    (alone, *_) = sibling_tiles.tiled_at(p.graph, p.kernels[v], 128, p.sizes, p.target)
    choices[v] = alone.choice
    other = with_choices(p, choices)
    assert other.kernels[k].schedule.threads == other.kernels[q].schedule.threads == 256
    assert other.kernels[v].schedule.threads == 128 and other.kernels[v].choice == alone.choice
    (la,) = other.launches
    assert sorted(la.members) == sorted([q, k]) and v not in la.members and not la.retiled
    assert sum(other.kernels[i].cost.time for i in la.members) == pytest.approx(la.together)
    sizes = {"t": 37, "m": 29, "n": 48, "k": 16}
    x = rng.standard_normal((37, 29)).astype(np.float16)
    w = {name: (rng.standard_normal((29, c)) * 0.2).astype(np.float16)
         for name, c in (("Wq", 48), ("Wk", 16), ("Wv", 16))}
    out = run_plan(other, {"X": x, **w}, sizes)
    for o, name in (("Q", "Wq"), ("K", "Wk"), ("V", "Wv")):
        assert_close(out[o], x.astype(np.float64) @ w[name].astype(np.float64), "f16", slack=4.0)


def test_unshared_gives_each_member_its_own_cost_again():
    """siblings.unshared (variants.with_merge decides the tail, then the launches again, from
    the kernels' own costs): the members' costs sum to the launch's `apart`, each in the
    ratio decide scaled them, the others unchanged."""
    p = plan(napkin.load(THREE), "h100", SCALE)
    (la,) = p.launches
    own = siblings.unshared(p.kernels, p.launches)
    assert sum(own[i].cost.time for i in la.members) == pytest.approx(la.apart, rel=1e-12)
    for i, (kp, mine) in enumerate(zip(p.kernels, own)):
        ratio = la.apart / la.together if i in la.members else 1.0
        assert mine.cost.time == pytest.approx(kp.cost.time * ratio, rel=1e-12)
    again, launches = siblings.decide(p.graph, own, p.sizes, p.target)
    (back,) = launches              # the same launch, to the rounding of the ratio
    assert (back.members, back.blocks) == (la.members, la.blocks)
    assert (back.apart, back.together) == pytest.approx((la.apart, la.together), rel=1e-12)
    assert [kp.cost.time for kp in again] == pytest.approx([kp.cost.time for kp in p.kernels])
