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
from napkin.compiler import siblings
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
    p = plan(napkin.load(THREE), "h100", SCALE)
    (la,) = p.launches
    k, v, q = _member(p, "K"), _member(p, "V"), _member(p, "Q")
    # K and V: one block shape, 128 blocks each (one wave together); Q's blocks have twice
    # the threads (one kernel's __launch_bounds__): apart
    assert set(la.members) == {k, v} and q not in la.members
    assert la.shared == "X" and la.waves == 1 and la.blocks == (128, 128)
    # one launch saved at least
    assert la.apart - la.together >= LAUNCH_SECONDS
    # each member's cost is its share: the plan's time is the launch's plus Q's
    assert sum(p.kernels[i].cost.time for i in la.members) == pytest.approx(la.together)
    # X (16 MiB) fits in H100's L2: the second member reads it from there
    assert la.from_l2 == 4096 * 2048 * 2


def test_a_single_kernel_is_priced_as_its_own_launch():
    """price() of one kernel is its cost (cost.py's terms, utilization, first tiles per wave
    and launch): what the model charged apart, it charges together."""
    p = plan(napkin.load(THREE), "h100", SCALE)
    q = p.kernels[_member(p, "Q")]
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
    product launched alone), and K tiled as Q (256 threads) leaves V (128) and shares Q's
    launch instead (a launch copied from the plan would hold K and V of two block shapes)."""
    p = plan(napkin.load(THREE), "h100", SCALE)
    same = with_choices(p, [kp.choice for kp in p.kernels])
    assert same.launches == p.launches and len(p.launches) == 1
    assert [kp.cost.time for kp in same.kernels] == pytest.approx([kp.cost.time for kp in p.kernels])
    k, v, q = _member(p, "K"), _member(p, "V"), _member(p, "Q")
    choices = [kp.choice for kp in p.kernels]
    choices[k] = _renamed_choice(p.kernels[q].choice, "n", "k")
    other = with_choices(p, choices)
    assert other.kernels[k].schedule.threads == other.kernels[q].schedule.threads == 256
    (la,) = other.launches
    assert sorted(la.members) == sorted([q, k]) and v not in la.members
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
