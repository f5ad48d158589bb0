"""The shortcuts the cost model takes for speed give what the plain computation gives:
blocks per SM without stacking the four limits, a mask's computed share once per distinct
combination of extents, the column sets M is the largest of memoised per kernel,
utilization given the blocks per SM it would count itself, a kernel's search answered
from an earlier planner of an equal problem, a search stopped where no block's footprint
fits, and a search answered for an equal model of another kernel. Each is checked against the
plain form, written out here, on random inputs with many ties and repeats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import napkin
from napkin.compiler import fractions, occupancy
from napkin.compiler import target as targets
from napkin.compiler.columns import columns, resident_sets
from napkin.compiler.model import kernel_model
from napkin.compiler.plan import plan
from napkin.diagrams.sources import Source

GPUS = ("a100", "h100", "h200")


def blocks_per_sm_plain(target, smem, threads, regs):
    """blocks_per_sm as np.argmin over the four limits stacked at the candidates' shape."""
    cap = target.levels[1].capacity_bytes
    by_smem = np.floor(cap / np.maximum(smem, 1))
    by_threads = np.floor(occupancy.THREAD_SLOTS / np.maximum(threads, 1))
    if regs is None or not target.registers_per_processor:
        by_regs = np.full(np.shape(by_smem), np.inf)
    else:
        per_warp = np.ceil(np.maximum(regs, 1) / occupancy.ALLOCATION) * occupancy.ALLOCATION \
            * occupancy.WARP
        warps = np.ceil(np.maximum(threads, 1) / occupancy.WARP)
        by_regs = np.floor(np.floor(target.registers_per_processor / per_warp) / warps)
    options = np.stack(np.broadcast_arrays(by_regs, by_smem, by_threads,
                                           np.full(np.shape(by_smem), float(occupancy.MAX_BLOCKS))))
    return np.maximum(np.min(options, axis=0), 1), np.argmin(options, axis=0)


@pytest.mark.parametrize("tname", GPUS)
def test_blocks_per_sm_is_the_first_fewest_of_the_four_limits(tname):
    target = targets.load(tname)
    rng = np.random.default_rng(GPUS.index(tname))
    cap = target.levels[1].capacity_bytes
    for _ in range(40):
        # open-mesh shapes like a candidate set's, sizes that often tie between limits
        smem = rng.choice([1.0, cap / 8, cap / 4, cap / 3, cap / 2, cap, 2 * cap], (7, 1, 1))
        threads = rng.choice([32.0, 64, 128, 256, 512, 1024], (1, 5, 1))
        regs = rng.choice([32.0, 40, 64, 128, 255], (7, 1, 3))
        for r in (regs, None):
            got, which = occupancy.blocks_per_sm(target, smem, threads, r)
            want, want_which = blocks_per_sm_plain(target, smem, threads, r)
            assert np.shape(got) == np.shape(want) and np.shape(which) == np.shape(want_which)
            assert np.array_equal(got, want) and np.array_equal(which, want_which)


def test_blocks_per_sm_of_one_choice_are_numbers():
    target = targets.load("h100")
    for smem, threads, regs in ((4096.0, 128.0, 64.0), (1, 1024, None), (2e5, 32.0, 255.0)):
        got, which = occupancy.blocks_per_sm(target, smem, threads, regs)
        want, want_which = blocks_per_sm_plain(target, smem, threads, regs)
        assert np.ndim(got) == 0 and np.ndim(which) == 0
        assert float(got) == float(want) and int(which) == int(want_which)
        assert occupancy.LIMITS[int(which)] == occupancy.LIMITS[int(want_which)]


def test_utilization_given_the_blocks_per_sm_is_utilization():
    target = targets.load("h200")
    rng = np.random.default_rng(3)
    blocks = rng.choice([1.0, 7, 132, 1000, 1e5], (6, 1))
    smem = rng.choice([1024.0, 5e4, 2e5], (1, 4))
    threads, regs = rng.choice([32.0, 128, 512], (6, 4)), rng.choice([40.0, 128], (6, 4))
    per_sm, _ = occupancy.blocks_per_sm(target, smem, threads, regs)
    assert np.array_equal(occupancy.utilization(target, blocks, smem, threads, None, regs, per_sm),
                          occupancy.utilization(target, blocks, smem, threads, None, regs))


def masked_models():
    """(model, sizes) of every library kernel whose chunks a mask hides, on each GPU."""
    out = []
    for name in ("causal_attention", "sliding_window_attention"):
        for tname in ("h100",):
            p = plan(napkin.load(name), tname, {})
            for kp in p.kernels:
                for axis in kp.kernel.reduced(p.graph):
                    model = kernel_model(p.graph, kp.kernel, axis)
                    if model.mask is not None and fractions.axes_of(model.mask):
                        out.append((f"{name} {kp.kernel.name} {axis}", model, p.sizes))
    return out


def test_a_masks_share_is_computed_per_candidate_as_alone():
    found = masked_models()
    assert found, "no library kernel with a mask"
    rng = np.random.default_rng(0)
    for label, model, sizes in found:
        axes = fractions.axes_of(model.mask)
        # repeats (the searches' meshes), fractional and broadcasting extents
        tiles = {a: rng.choice([1.0, 16, 64, 100.5, 128, 4096], (6, 1) if i % 2 else (1, 5))
                 for i, a in enumerate(axes)}
        got = fractions.computed_fraction(model.mask, sizes, tiles)
        shape = np.broadcast_shapes(*(np.shape(v) for v in tiles.values()))
        assert np.shape(got) == shape, label
        for where in np.ndindex(shape):
            alone = fractions.computed_fraction(
                model.mask, sizes, {a: float(np.broadcast_to(v, shape)[where])
                                    for a, v in tiles.items()})
            assert isinstance(alone, float) and got[where] == alone, (label, where)


def column_sets_plain(cols, held, symbolic):
    sets = list(dict.fromkeys(tuple(i for i in col.resident if i in held) for col in cols))
    if symbolic:
        return sets
    return [s for s in sets if not any(set(s) < set(o) for o in sets)]


@pytest.mark.parametrize("name", ["attention", "layernorm", "mlp", "swiglu", "cross_entropy"])
def test_the_memoised_column_sets_are_the_column_sets(name):
    p = plan(napkin.load(name), "h100", {})
    rng = np.random.default_rng(len(name))
    for kp in p.kernels:
        for axis in (None,) + tuple(kp.kernel.reduced(p.graph)):
            model = kernel_model(p.graph, kp.kernel, axis)
            cols = columns(p.graph, model)
            for _ in range(6):
                held = {int(i): None for i in rng.choice(len(model.arrays),
                                                         rng.integers(0, len(model.arrays) + 1),
                                                         replace=False)}
                for symbolic in (False, True):
                    want = column_sets_plain(cols, held, symbolic)
                    assert resident_sets(cols, held, symbolic) == want   # computed
                    assert resident_sets(cols, held, symbolic) == want   # memoised
                    assert resident_sets(list(cols), held, symbolic) == want


# (diagram, target, shape, engine): tensor cores with the online softmax, a split of the keys
# (its rewritten graph planned too), the CUDA cores at odd sizes, a masked scatter
REPLANNED = [("attention", "h100", {"q": 77, "x": 130}, "auto"),
             ("paged_attention", "h100", {}, "auto"),
             ("layernorm", "a100", {"r": 131, "c": 77}, "cuda-cores"),
             ("embedding", "h100", {}, "auto"),
             ("mlp", "two-level", {}, "auto")]


def test_a_problem_planned_again_is_planned_as_the_first_time(monkeypatch):
    """KernelPlanner's answers are shared by the planners of equal problems (kernel_plan's
    _shared_found), handed back under the kernel that asks: a second plan of each problem, and
    explain's unfused baseline (its kernels named as fusion did not name them), are the plans
    the search makes itself, to every field of every kernel's model and schedule and to the
    CUDA printed; an error is the same error."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.compiler import kernel_plan
    from napkin.compiler.plan import baseline
    from napkin.diagrams.diagnostics import NapkinError

    def made(name, target, shape, engine):
        p = plan(napkin.load(name), target, shape, engine=engine)
        return (repr(p.kernels), repr(p.split), repr(p.tail), repr(baseline(p)),
                render(lower(p)) if target != "two-level" else "")

    attention = Path(__file__).parents[2] / "diagrams" / "library" / "attention.napkin"
    errors = [(attention.read_text() + "group q by 1024 at registers\n", "auto"),     # N0603
              ("axis t, m, o\nin X[t m]: f32\nin W[m o]: f16\nY[t o] = X * W\nout Y: f32\n",
               "tensor-cores")]                                                      # N0606

    def error(text, engine):
        with pytest.raises(NapkinError) as exc:
            plan(napkin.load(Source("refused.napkin", text)), "h100",
                 {"b": 4, "h": 16, "q": 4096, "x": 4096}, engine=engine)
        return str(exc.value)

    shared = kernel_plan._shared_found
    with monkeypatch.context() as m:          # the search itself, every time
        m.setattr(kernel_plan, "_shared_found", lambda planner, k, quick: planner._plan(k, quick))
        plain = [made(*case) for case in REPLANNED]
        plain_errors = [error(*case) for case in errors]
    kernel_plan._FOUND.clear()
    answered, renamed = [0], [0]

    def counted(planner, k, quick):
        key = (planner._problem, k.nodes, k.loads, k.stores, quick)
        hit = kernel_plan._FOUND.get(key)
        if hit is not None:
            answered[0] += 1
            renamed[0] += isinstance(hit, kernel_plan.KernelPlan) and hit.kernel != k
        return shared(planner, k, quick)
    monkeypatch.setattr(kernel_plan, "_shared_found", counted)
    for _ in range(2):
        assert [made(*case) for case in REPLANNED] == plain
        assert [error(*case) for case in errors] == plain_errors
    assert answered[0] and renamed[0]        # (the memo answered, some under another name)


def test_a_search_stopped_at_the_blocks_footprint_finds_what_the_whole_evaluation_finds(
        monkeypatch):
    """cost.evaluate(fitting=True) answers None as soon as no candidate's shared-memory
    footprint fits the blocks' level, before the register level and the time terms: every
    search of attention's candidate kernels (fusion's quick ones and the final ones, some
    with no tiling that fits) finds the same choice and cost as the search over
    the whole evaluation of every candidate (fitting=False), and some searches do stop
    there."""
    from napkin.compiler import cost, search as search_mod

    asked = []
    real = search_mod.search
    monkeypatch.setattr(search_mod, "search", lambda *a, **k: asked.append((a, k)) or
                        real(*a, **k))
    plan(napkin.load("attention"), "h100", {"q": 4096, "x": 4096})
    monkeypatch.undo()
    stopped = 0
    whole = cost.evaluate
    for args, kw in asked:
        found = search_mod.search(*args, **kw)
        model, cols, target, sizes = args[:4]
        fixed = args[4] if len(args) > 4 else None
        candidates = search_mod._candidate_set(model, target, sizes, fixed or {},
                                               kw.get("fine", False), kw.get("quick", False))
        if candidates is not None and cost.evaluate(model, cols, candidates[0], sizes, target,
                                                    fitting=True) is None:
            stopped += 1
        monkeypatch.setattr(search_mod, "evaluate",
                            lambda *a, fitting=False, **k: whole(*a, **k))
        plain = search_mod.search(*args, **kw)
        monkeypatch.undo()
        assert repr(found) == repr(plain)
    assert stopped and len(asked) > stopped, (stopped, len(asked))


def test_a_search_is_answered_for_an_equal_model_only(monkeypatch):
    """search.searched memoises search on what it reads: a model equal but for the kernel it
    names is answered without searching, with what searching it finds; another streamed axis
    (another model), quick or not, or other fixed decisions are searched again, each finding
    what search finds."""
    from collections import OrderedDict
    from dataclasses import replace

    from napkin.compiler import search as search_mod
    from napkin.compiler.kernels import FusedKernel

    p = plan(napkin.load("softmax"), "h100", {"r": 77, "c": 130})
    g, k = p.graph, p.kernels[0].kernel
    models = {axis: kernel_model(g, k, axis) for axis in (None, *k.reduced(g))}
    assert len(models) == 2
    monkeypatch.setattr(search_mod, "_SEARCHED", OrderedDict())     # (none from the plan)
    searches = []
    real = search_mod.search
    monkeypatch.setattr(search_mod, "search",
                        lambda *a, **kw: searches.append(a[0].streaming.axis) or real(*a, **kw))
    target, sizes = targets.load("h100"), p.sizes
    group = next(iter(models[None].woven))
    asks = [(axis, quick, fixed) for axis in models for quick in (False, True)
            for fixed in (None, {"group": {group: 1}})]
    for axis, quick, fixed in asks:
        model = models[axis]
        cols = columns(g, model)
        first = search_mod.searched(model, cols, target, sizes, fixed, quick)
        renamed = replace(model, kernel=FusedKernel("other", k.nodes, k.loads, k.stores,
                                                    k.equations))
        again = search_mod.searched(renamed, cols, target, sizes, fixed, quick)
        want = real(model, cols, target, sizes, fixed, quick=quick)
        assert repr(first) == repr(again) == repr(want), (axis, quick, fixed)
    assert len(searches) == len(asks)     # (each renamed model answered, each other searched)
