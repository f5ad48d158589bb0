"""Specialisation: dynamic axes planned as if fixed at the planning shape's size (like -D).

FlashAttention (flash.py) and the tensor-core chains (chain.py) need the head axes
static: a block holds whole rows of the head in its fragments, so their width is a
number the kernel is built around. A diagram that leaves the head dynamic (`axis d`
without a size: PyTorch callers bring d = 64 or d = 128 tensors) would otherwise never
get them. The planner therefore decides, once per plan:

    candidates  the dynamic axes such a lowering would need static: the contracted axis
                of a product that feeds, through elementwise functions and softmaxes only,
                another product, and the axes that second product keeps from its other
                operand (attention's `d` twice, an MLP's input and output widths), where
                every axis of such a pair is static or a candidate too (a lowering of the
                two holds them all whole: one beside an axis left dynamic never is); only
                those whose size was given (never a defaulted one: the planning default is
                no caller's size) and at most MAX_SIZE (any size: a head that is not a
                multiple of 16 or 8 is padded in shared memory, headpad.py)
    decide      the diagram checked again with them fixed at those sizes (front.load, as
                -D does) and planned, then again with only those the winning plan's
                tensor-core kernels hold whole (`held`: projected attention's `m`, kept by
                a plain product, stays dynamic); that plan is taken when it is predicted
                at least MARGIN faster, with `Plan.specialised` = {axis: size}

Everything after reads `Plan.specialised` and never decides again: codegen prints it in
the CUDA file's header (codegen/render.py), explain says it, and the runtime refuses to
launch a specialised program at other sizes (`check`: N0308). The callers that plan per
call's sizes (`Kernel.compiled_for`, `napkin run`, the PyTorch op) key their compiled
kernels by every size, so each head size compiles its own kernel.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..diagrams.diagnostics import NapkinError, error
from . import ir

MAX_SIZE = 512          # the widest head a FlashAttention block holds (MLA's value head)
CONTRACTED, KEPT = 16, 8   # the multiples flash.py and chain.py take a static axis in
MARGIN = 0.05           # a specialised plan is taken when this much faster (a compile per size)
ELEMENTWISE = (ir.Map, ir.Assign, ir.Softmax, ir.Const, ir.Index, ir.SizeOf)


def _feeding_product(g, n: int) -> int | None:
    """The product n is, or computes from through elementwise functions and softmaxes only."""
    todo, seen = [n], set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        op = ir.op(g, m)
        if isinstance(op, ir.Contract):
            return m
        if isinstance(op, ELEMENTWISE):
            todo.extend(ir.operands(g, m))
    return None


def chained_pairs(g) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(the axes the first contracts, those the second keeps from its other operand) of every
    product that feeds another through elementwise functions and softmaxes: what a lowering
    of the two holds whole (FlashAttention's dk and dv, a chain's dk and e), all of them."""
    out = []
    for n in g.nodes:
        if not isinstance(ir.op(g, n), ir.Contract):
            continue
        for operand in ir.operands(g, n):
            first = _feeding_product(g, operand)
            if first is not None:
                out.append((tuple(ir.op(g, first).axes), tuple(sorted(
                    set(ir.type_of(g, n).axes) - set(ir.type_of(g, first).axes)))))
    return out + _statistics_alone(g)


def _statistics_alone(g) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(the axes a product contracts, ()) of every product whose row statistic over an axis
    it keeps is taken (`logsumexp[x](Q * K / 4)`, max, sum of exp: compiler/flash_alone.py,
    FlashAttention without P V, holds its contracted head whole)."""
    out = []
    for n in g.nodes:
        op = ir.op(g, n)
        if not isinstance(op, ir.Reduce) or op.fn not in ("logsumexp", "max", "sum"):
            continue
        (arg,) = ir.operands(g, n)
        if op.fn == "sum":          # (a sum of the exponentials of the scores only)
            while isinstance(ir.op(g, arg), ir.Assign):
                arg = ir.operands(g, arg)[0]
            if ir.op(g, arg) != ir.Map("exp"):
                continue
        first = _feeding_product(g, arg)
        if first is not None and set(op.axes) <= set(ir.type_of(g, first).axes):
            out.append((tuple(ir.op(g, first).axes), ()))
    return out


def chained_axes(g) -> dict[str, int]:
    """Axes of products that feed products (the module docstring's candidates, any size),
    each with the multiple the fragments take it in: 16 where it is contracted (the A and B
    fragments' k), else 8 (a C fragment's columns; another size is padded to it, headpad.py)."""
    out: dict[str, int] = {}
    for contracted, kept in chained_pairs(g):
        for a in contracted:
            out[a] = CONTRACTED
        for a in kept:
            out.setdefault(a, KEPT)
    return out


def candidates(p) -> dict[str, int]:
    """axis -> size: the dynamic axes of the plan's diagram worth planning static."""
    return candidates_of(p.diagram, p.sizes, p.defaulted)


def candidates_of(diagram, sizes: dict, defaulted) -> dict[str, int]:
    """axis -> size: the dynamic axes of `diagram` worth planning static at these sizes, read
    off its canonical IR (_canonical)."""
    axes = diagram.axes
    g = _canonical(diagram)
    found = {a: sizes[a] for a in sorted(chained_axes(g))
             if axes.get(a, 0) is None and a not in defaulted and a in sizes
             and sizes[a] <= MAX_SIZE}
    # a lowering holds every axis of its pair whole: one beside an axis that stays dynamic
    # (self-attention's gradient at s = 512: the products over s keep m = 1024 or are fed by
    # one over m) is held by none, and fixing it alone would plan the diagram again for nothing
    static = {a for a, size in axes.items() if size is not None}
    pairs = [set(c) | set(k) for c, k in chained_pairs(g)]
    while True:
        held = {a for pair in pairs if pair <= static | set(found) for a in pair}
        if set(found) <= held:
            return found
        found = {a: v for a, v in found.items() if a in held}


def _canonical(diagram):
    """The diagram's IR as the planner reads it (canonical.canonicalize), no axis merged: a
    product spelt as a sum, swiglu's one line `silu(sum[m](X * Wg)) * sum[m](X * Wu)`, is a
    contraction there only (in the diagram's IR a sum of a product, no candidate: it planned
    at 7.26 us where the library's named spelling, specialised, plans at 5.43 us, h100 model
    at 128)."""
    from .canonical import canonicalize
    return canonicalize(diagram.ir, keep=tuple(diagram.ir.graph["axes"]))


def decide(p, replan: Callable):
    """The plan `p`, or the plan of its diagram with the candidates fixed (`replan(diagram)`
    plans a diagram as `p` was planned) where that is predicted MARGIN faster."""
    fixed = candidates(p)
    if not fixed or p.specialised or p.engine == "cuda-cores":   # (lowerings on tensor cores)
        return p
    try:
        other, fixed = _needed(replan, p.diagram, fixed)
    except NapkinError as exc:  # (fixed, a kernel no tiling fits, or the user's options
        # refuse the plan: the dynamic plan stands, and explain says why)
        first = exc.diagnostics[0]
        at = ", ".join(f"{a} = {v}" for a, v in fixed.items())
        return replace(p, refused=f"{', '.join(fixed)} kept dynamic: planned with {at} fixed, "
                                  f"{first.message} [{first.code}]")
    if not fixed or other.time > p.time * (1 - MARGIN):
        return p
    return replace(other, specialised=fixed, unspecialised=float(p.time))


def held(plan) -> set[str]:
    """The axes the plan's tensor-core kernels hold whole, which their lowerings need static:
    an attention's heads (flash.py), a chain's contracted and kept axes (chain.py); a plain
    product streams its contracted axis with a tail and tiles the others (none)."""
    out: set[str] = set()
    for kp in plan.kernels:      # (the sites by their fields: flash.py and chain.py import
        s = kp.schedule.site if kp.schedule is not None else None      # this module)
        if hasattr(s, "dv"):                            # flash.FlashSite
            out |= {s.dk, s.dv} - {None}                # (no dv: statistics alone)
        elif hasattr(s, "outs"):                        # chain.ChainSite
            out |= {sc.dk for sc in s.scores} | {p.e for p in s.outs} | {a.e for a in s.across}
    return out


def _needed(replan: Callable, diagram, fixed: dict) -> tuple:
    """(the plan of `diagram` with the axes of `fixed` that its tensor-core kernels need
    static fixed, those axes): planned with all of them, then, where the winning plan holds
    fewer whole (`held`: projected attention's `m` beside its head `d`, whose product runs
    on the CUDA cores or as a plain product), planned again with those only (each size of a
    fixed axis compiles its own kernel), or with none: ({}, the first plan)."""
    from .front import load
    plan = replan(load(diagram, **fixed))
    needed = {a: v for a, v in fixed.items() if a in held(plan)}
    if needed == fixed or not needed:
        return plan, needed
    return replan(load(diagram, **needed)), needed


def decided(dynamic: Callable, problem, replan: Callable):
    """`decide` on the plan `dynamic()` makes of `problem` (plan.Problem); where it raises
    N0606 (`--engine tensor-cores`: FlashAttention and the chains need the head static, which
    a given planning size makes it), the plan with the candidates fixed, `unspecialised` 0
    (no plan with them dynamic); the error again where there are none or that plan is
    refused too (its own error where it is refused for another reason than N0606: the
    plan the engine could run asks for what the user's options refuse, `--merge last-block`
    where its merge cannot run in the tail)."""
    try:
        return decide(dynamic(), replan)
    except NapkinError as exc:
        if {d.code for d in exc.diagnostics} != {"N0606"}:
            raise
        fixed = candidates_of(problem.diagram, problem.sizes, problem.defaulted)
        if not fixed:
            raise
        try:
            other, needed = _needed(replan, problem.diagram, fixed)
        except NapkinError as again:
            raise (exc if {d.code for d in again.diagnostics} == {"N0606"} else again) \
                from None
        return replace(other, specialised=needed or fixed)


def fix(axes: dict, *names: str) -> str:
    """How to make head axes static (flash.py and chain.py say it where they refuse one):
    a dynamic axis is also specialised when planned at a given size."""
    dynamic = [a for a in dict.fromkeys(names) if axes[a].size is None]
    said = f"fix it with `axis {names[0]} = 64` or -D"
    if dynamic:
        said += ", or plan for the size (--shape " + ",".join(f"{a}=64" for a in dynamic) + \
            ": specialised)"
    return f"({said})"


def describe(specialised: dict) -> str:
    """`d = 64, e = 128` (explain and the CUDA header print it)."""
    return ", ".join(f"{a} = {v}" for a, v in sorted(specialised.items()))


def check(specialised, sizes: dict) -> None:
    """N0308 where `sizes` give a specialised axis another size than its kernel was built for."""
    for a, v in sorted(dict(specialised).items()):
        if a in sizes and int(sizes[a]) != v:
            raise error("N0308", f"this kernel was specialised for {a} = {v} and is called "
                        f"with {a} = {int(sizes[a])}",
                        help=f"`{a}` is dynamic in the diagram: plan for these sizes "
                        "(napkin.compile's Kernel does, one kernel per size), or fix it "
                        f"with `axis {a} = {int(sizes[a])}` or -D")
