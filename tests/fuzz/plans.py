"""Random legal plans for the library diagrams (a Hypothesis strategy) and their check.

Per kernel: a group tile per woven axis (1, tiles that do not divide the axis,
the whole axis, larger than the axis), a thread tile within it, the streamed
axis (any reduced axis, or none: every axis whole) and its chunk (1, odd,
larger than the axis), and a reduced axis split over 2..32 lanes (powers of
two, one warp, as the emulator's shuffles need). Legal: a block has at most 1024
threads and the plan fits every memory level (registers, shared memory) by the
cost model; over a capacity, the largest group tile is halved. Every plan runs through the interpreter and the emulator and is
compared with the reference (tolerance rule) and with the default plan.
"""

from __future__ import annotations

import re

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import napkin
from napkin.compiler import packing
from napkin.compiler.columns import columns
from napkin.compiler.cost import Choice, evaluate
from napkin.compiler.model import kernel_model as build_model
from napkin.compiler.plan import plan as make_plan
from napkin.compiler.variants import with_choices, with_merge
from napkin.compiler.search import fits
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.sources import library_source
from napkin.runtime import compare
from napkin.runtime.interpret import interpret

from .gen import Case, inputs_for
from .harness import Checked, Failure, _trace, run_backends

SMALL = (1, 2, 3, 5, 7, 9, 13, 17, 33)
LANES = (2, 4, 8, 16, 32, 64, 256)    # (64 and 256: a split over 2 and 8 warps)
MAX_THREADS = 1024


def library(name: str, dtype: str, **sizes):
    text = re.sub(r":\s*f16\b", f": {dtype}", library_source(name).text)
    return napkin.load(Source(f"<library:{name}:{dtype}>", text), **sizes)


def random_choice(draw, kp, plan) -> Choice:
    """A random choice for kernel `kp` of `plan` within the target's capacities."""
    model = kp.model          # (packed rows, GQA's `(r q)`: one axis of their sizes' product)
    sizes = packing.sized(model.packed, plan.sizes)
    woven, reduced = list(model.woven), list(model.reduced)
    group, thread = [], []
    for a in woven:
        n = sizes[a]
        g = draw(st.sampled_from([1, 2, 3, 4, 8, n, n + 1, max(1, n - 1)]))
        t = draw(st.sampled_from([1, 2, 3, 4]))
        group.append((a, g))
        thread.append((a, min(t, g)))
    stream = split = None
    if reduced:
        axis = draw(st.sampled_from([None] + reduced))
        if axis is not None:
            n = sizes[axis]
            stream = (axis, draw(st.sampled_from([1, 2, 3, 8, n, n + 2])))
        if draw(st.booleans()):
            split = (draw(st.sampled_from(reduced)), draw(st.sampled_from(LANES)))
    ways = split[1] if split else 1
    tiles = dict(group)
    per = dict(thread)
    for _ in range(64):
        # at most MAX_THREADS threads: coarsen the thread tiles of the largest groups
        while ways * int(np.prod([-(-tiles[a] // per[a]) for a in woven] or [1])) > MAX_THREADS:
            a = max(woven, key=lambda x: -(-tiles[x] // per[x]))
            per[a] = min(tiles[a], per[a] * 2)
        choice = Choice(tuple(sorted(tiles.items())), stream, tuple(sorted(per.items())), split)
        if split is not None and not _lanes_legal(plan, kp, choice):
            split, ways = None, 1       # (a reduction over it nested in another: N0604)
            continue
        if fits(cost_of(plan, kp, choice)):
            return choice
        # over a capacity (registers, shared memory): halve the largest group tile
        big = [a for a in woven if tiles[a] > 1]
        if not big:
            break
        a = max(big, key=lambda x: tiles[x])
        tiles[a] = max(1, tiles[a] // 2)
        per[a] = min(per[a], tiles[a])
    return kp.choice          # nothing smaller fits: the planner's own choice


def _lanes_legal(plan, kp, choice: Choice) -> bool:
    """Whether the schedule's rules allow the choice's split over lanes (schedule.build
    refuses one nested in another reduction over it: a merge of a split before a softmax)."""
    from napkin.compiler import schedule
    model = build_model(plan.graph, kp.kernel, choice.stream[0] if choice.stream else None)
    try:
        schedule.build(plan.graph, kp.kernel, model, choice, plan.sizes, plan.target)
    except NapkinError as exc:
        return "over lanes" not in exc.diagnostics[0].message
    return True


def cost_of(plan, kp, choice: Choice):
    model = build_model(plan.graph, kp.kernel, choice.stream[0] if choice.stream else None)
    return evaluate(model, columns(plan.graph, model), choice, plan.sizes, plan.target)


def library_text(name: str, dtype: str) -> str:
    return re.sub(r":\s*f16\b", f": {dtype}", library_source(name).text)


@st.composite
def planned(draw, names):
    """(diagram, shape, random plan, default plan, seed) for a library diagram."""
    name = draw(st.sampled_from(list(names)))
    dtype = draw(st.sampled_from(["f32", "f16", "bf16"]))
    d = library(name, dtype)
    small = {}
    if "d" in d.axes:
        small["d"] = draw(st.sampled_from([8, 9, 16]))
    if d.axes.get("x"):       # paged_attention fixes its keys (no input has them): few here too
        small["x"] = draw(st.sampled_from(SMALL))
    if small:
        d = library(name, dtype, **small)
    reps = d.ir.graph["axes"]                 # axes the diagram makes equal share one size
    drawn = {r: draw(st.sampled_from(SMALL)) for r in dict.fromkeys(
        reps[a].rep for a, s in d.axes.items() if s is None)}
    shape = {a: drawn[reps[a].rep] for a, s in d.axes.items() if s is None}
    fused = draw(st.booleans())
    split = draw(split_hint(d, shape))
    if split is None and draw(st.booleans()):   # or splits of some kernels alone, named on
        split = draw(kernel_split_hint(make_plan(d, "h100", shape, fusion=fused)))  # the plan
    merge = draw(st.sampled_from(["auto", "last-block"])) if split else "auto"
    default = _default_plan(d, shape, split, fused, merge)
    choices = [random_choice(draw, kp, default) for kp in default.kernels]
    # the interpreter walks blocks and chunks in Python: tile 1 over several axes of 33
    # (35,937 blocks x 33 chunks) ran for over an hour in one case
    assume(sum(_steps(c, packing.sized(kp.model.packed, default.sizes))
               for c, kp in zip(choices, default.kernels)) <= MAX_STEPS)
    return d, shape, with_choices(default, choices), default, draw(st.integers(0, 2**16)), fused


def _default_plan(d, shape, split, fused, merge):
    """The planner's plan; a split's merge in the last blocks when `merge` asks and the plan
    allows it (compiler/last_block.py refuses some small plans: then the merge kernel)."""
    p = make_plan(d, "h100", shape, {"split": split} if split else None, fusion=fused)
    if merge == "auto" or p.split is None:
        return p
    try:
        return with_merge(p, merge)
    except NapkinError as exc:
        if "cannot merge in the last block" not in str(exc):
            raise
        return p


@st.composite
def kernel_split_hint(draw, unsplit):
    """Splits of kernels alone (compiler/named_split.py) on the unsplit plan's kernels: one
    or two kernels, each an axis it reduces that splits within its statements, named by an
    array it computes (`{"dg:r": 3}`), by counts that do not divide the axis, equal it or
    pass it; None where no kernel has such an axis (or the plan split already)."""
    from napkin.compiler.split import splittable
    if unsplit.split is not None:
        return None
    g = unsplit.graph
    names = {e.stmt: e.name for e in g.graph["equations"]}
    options = []
    for kp in unsplit.kernels:
        k, own = kp.kernel, frozenset(kp.kernel.equations)
        computed = [names[s] for s in k.equations if s not in k.recomputed and s in names
                    and names[s].isidentifier()]      # (the diagram's, not `O:softmax[x]`)
        axes = [a for a in k.reduced(g) if a in g.graph["axes"] and
                splittable(g, a, own) is None]
        if computed and axes:
            options.append((computed, axes))
    if not options:
        return None
    out: dict = {}
    for computed, axes in draw(st.lists(st.sampled_from(options), min_size=1, max_size=2,
                                        unique_by=lambda o: o[0][0])):
        axes = [a for a in axes if a not in {key.split(":")[1] for key in out}]
        if axes:        # (one split per axis)
            axis = draw(st.sampled_from(axes))
            n = unsplit.sizes[axis]
            out[f"{draw(st.sampled_from(computed))}:{axis}"] = draw(
                st.sampled_from([2, 3, 5, n, n + 2]))
    return out


@st.composite
def split_hint(draw, d, shape):
    """Half the time a split of a reduced axis across blocks (compiler/split.py), by counts
    that do not divide the axis, equal it or pass it (empty splits); else none."""
    from napkin.compiler.canonical import canonicalize
    from napkin.compiler.split import splittable
    g = canonicalize(d.ir)
    axes = [a for a in g.graph["axes"] if splittable(g, a) is None]
    if not axes or not draw(st.booleans()):
        return None
    axis = draw(st.sampled_from(axes))
    n = shape.get(axis) or d.axes[axis]
    return {axis: draw(st.sampled_from([1, 2, 3, 5, n, n + 2]))}


MAX_STEPS = 20_000      # blocks x chunks the interpreter walks, over a plan's kernels


def _steps(c, sizes: dict) -> int:
    blocks = 1
    for a, g in c.group:
        blocks *= -(-int(sizes[a]) // int(g))
    chunks = -(-int(sizes[c.stream[0]]) // int(c.stream[1])) if c.stream else 1
    return blocks * chunks


def describe(case) -> str:
    d, shape, p, _, seed, _ = case
    split = "".join(f" split={s.axis}:{s.parts}" + (f" in {s.alone.arrays[0]}'s kernel"
                                                    if s.alone else "")
                    for s in (p.split.each() if p.split else ()))
    if case[3].tails:
        split += " merged in the last blocks (default plan)"
    return (f"{d.name} shape={shape} seed={seed}{split} "
            f"choices={[k.choice for k in p.kernels]} kernels={len(p.kernels)}")


def as_regression(case) -> tuple:
    """(Case, options) to save a failing random plan under tests/regressions/."""
    d, shape, p, default, seed, fused = case
    name, dtype = d.name.strip("<>").split(":")[1:3]
    options = {"choices": [k.choice for k in p.kernels], "defines": dict(d.overrides) or None,
               "fusion": fused}
    if p.split is not None:        # (a kernel's alone: named by an array it computes)
        options["split"] = {(f"{s.alone.arrays[0]}:" if s.alone else "") + s.axis: s.parts
                            for s in p.split.each()}
    if default.tails:
        options["merge"] = "last-block"
    return Case(f"# {d.name}\n" + library_text(name, dtype), shape, seed), options


TAILS = float(__import__("os").environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2


def check_plan(case, emulate: bool = True, sanitize: str = "none", tails: bool = TAILS) -> None:
    """Interpret and emulate a random plan; compare with the reference and the default plan
    (`tails`: emulate the default plan too where its merge runs in the last blocks: the long
    budgets of benchmarks/fuzz.py and the thorough tier; the default suite's are
    tests/codegen/test_last_block.py's)."""
    d, shape, p, default, seed, _ = case
    inputs = inputs_for(d, shape, seed)
    ref, low, order = compare.references(d, inputs, p)
    mine = run_backends(d, p, inputs, p.sizes, ref, low, emulate=emulate, sanitize=sanitize,
                        order=order)
    if default.tails and emulate and tails:   # the random plan's merges launch:
        run_backends(d, default, inputs, default.sizes, ref, low, interp=False,   # the tail
                     sanitize=sanitize, order=compare.references(d, inputs, default)[2])
    try:
        theirs = interpret(default, inputs)     # (the random plan's: run_backends')
    except Exception as exc:  # noqa: BLE001
        raise Checked(Failure("run", "interpret", _trace(exc))) from None
    for s in d.outputs:      # both in float64: the schedules must agree far below rounding
        a, b = mine[s.name], theirs[s.name]
        scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
        if not np.array_equal(np.isnan(a), np.isnan(b)) or \
                float(np.max(np.abs(a - b), initial=0.0)) > 1e-9 * scale:
            raise Checked(Failure("compare", "interpret vs default plan",
                                  f"{s.name}: max difference {np.max(np.abs(a - b)):.3g}"))
