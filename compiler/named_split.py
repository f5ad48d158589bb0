"""Splits of kernels alone as the user asks for them (part of stage `fuse`, beside
kernel_split.py's choice): `--split dg:r=8` (`split={"dg:r": 8}` in napkin.compile) splits
axis `r` in 8 in the kernel of the unsplit plan that computes `dg`, its statements alone, the
other kernels unchanged, as kernel_split.best would (the same rewrite, regrouping and
pricing), but with the kernel, the axis and the count fixed by the hint. Several such hints
split several kernels, one axis each, in the order given; `--split dg:r=1` leaves that kernel
unsplit. A hint naming no computed array, an axis the kernel does not reduce or cannot split,
or a kernel or an axis split twice is N0201 / N0607 at the hint, with what would do."""

from __future__ import annotations

from ..diagrams.diagnostics import did_you_mean, error
from . import split as splits
from .kernel_split import alone, changed, decided, final_of, regrouped


def check(g, forced) -> None:
    """The hints' names checked on the canonical graph `g` before fusion (`forced`: the split
    hints as (axis, parts, span, array), splitting.split_hints): each names an array the
    diagram computes, no axis twice, and no split of the whole diagram beside them."""
    whole = [f for f in forced if f[3] is None]
    if whole:
        axis, _, span, _ = whole[0]
        raise error("N0607", f"a split of the whole diagram (`{axis}`) beside splits of kernels "
                    "alone (" + ", ".join(f"`{f[3]}:{f[0]}`" for f in forced if f[3]) + ")",
                    span, help=f"split `{axis}` in the kernels that reduce it alone "
                    f"(--split ARRAY:{axis}=COUNT), or keep the split of the whole diagram only")
    computed = [e.name for e in g.graph["equations"] if e.name.isidentifier()]
    seen: dict[str, str] = {}
    for axis, parts, span, array in forced:
        spelt = f"--split {array}:{axis}={parts}"
        if array in g.graph["inputs"]:
            raise error("N0607", f"{spelt}: `{array}` is an input, no kernel computes it", span,
                        help="name an array an equation computes: " + ", ".join(computed))
        if array not in computed:
            raise error("N0201", f"{spelt}: the diagram computes no array `{array}`", span,
                        help=did_you_mean(array, computed, "arrays: " + ", ".join(computed)))
        if axis in seen:
            raise error("N0607", f"{spelt}: `{axis}` is split in the kernel computing "
                        f"`{seen[axis]}` already (one split per axis)", span,
                        help=f"a kernel split over `{axis}` splits each of its reductions over "
                             f"it: name one array of that kernel, or split another axis")
        seen[axis] = array


def hinted(problem, fuse, base, split_problem, forced) -> list:
    """[(the fusion with one more kernel split, its axis, its count, its Alone), ...] as the
    hints `forced` say, in their order (kernel_split.best's form; [] where every count is 1)."""
    check(problem.graph, forced)
    named = {frozenset(k.equations): k.name for k in base.kernels}    # (the unsplit plan's)
    rounds: list = []
    fused = base
    by: dict[str, str] = {}           # unsplit kernel -> the hint that split it
    for axis, parts, span, array in forced:
        if parts == 1:
            continue
        g = fused.problem.graph
        spelt = f"--split {array}:{axis}={parts}"
        stmt = next(e.stmt for e in g.graph["equations"] if e.name == array)
        k = next(k for k in fused.kernels if stmt in k.equations and stmt not in k.recomputed)
        name = named.get(frozenset(k.equations))
        if name is None or name in by:
            raise error("N0607", f"{spelt}: the kernel computing `{array}` is split already "
                        f"({by.get(name) or 'by an earlier hint'})", span,
                        help="name an array of another kernel, or drop one of the hints")
        reduced = [a for a in k.reduced(g) if a in g.graph["axes"]]
        if axis not in reduced:
            raise error("N0607", f"{spelt}: kernel {name}, computing `{array}`, reduces no "
                        f"`{axis}`", span, help=(
                            "it reduces " + ", ".join(f"`{a}`" for a in reduced) +
                            f": --split {array}:{reduced[0]}={parts}") if reduced else
                        "it reduces nothing: name an array of a kernel with a reduction")
        own = frozenset(k.equations)
        why = splits.splittable(g, axis, own)
        if why is not None:
            raise splits.refuse(axis, why, span)
        pr = split_problem(fused.problem, axis, parts, span, within=own)
        after = decided(fused, fuse(pr, regrouped(fused, pr)))
        old, new = changed(fused, after)
        info = after.problem.graph.graph["split"]
        before_s = final_of(fused.stored16 or fused, old, None)
        after_s = final_of(after.stored16 or after, new, info)
        rounds.append((after, axis, parts, alone(fused, info, old, before_s, after_s, named)))
        by[name] = spelt
        fused = after
    return rounds


__all__ = ["check", "hinted"]
