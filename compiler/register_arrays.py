"""Per-thread register arrays of a CUDA-core kernel, and how they are indexed (decided once).

At each of its points a CUDA-core thread holds, in a register array, a value over the axes
of it the kernel does not weave (codegen/accum._extra, codegen/registers.py): a streamed
reduction's state (S[t s] = X * Y streamed over m, its scores' logsumexp over s in the
same kernel: S over all of s, `st0[37]`), a streamed softmax's row statistics, an online
softmax's rescaled output, a reduction held before a pass (held_values.py). Such an array
stays in registers only where every index into it is a constant once nvcc has unrolled
the loops around it. A loop whose trip count is known at run time only (a dynamic axis:
`for (j = 0; j < n1; ++j) st0[j]`) indexes it at run time, and nvcc places the whole
array in local memory: every access an LDL or STL through L1/L2, which the model (pricing
registers) does not see. That logsumexp at s = 37 dynamic, t = 37, m = 64 (f16, h100):
113 LDL and 119 STL in the kernel's static SASS, its issue count 5.8x the model's.

`held_axes` lists the axes such arrays run over (Model.held_axes): the axes whose walks
index one. The plan decides for all of them one placement: each walk of such an axis is
a loop of constant trips, the extent the array was given at planning (the lanes' share of
a split axis: codegen/accum.extent_of), unrolled, each position guarded by the run-time
size where the axis is dynamic (codegen/held.loops, scalar._walk: `constant_trips`); the
launchers refuse a run-time size past the planned one (Program.held, `check`: N0308), which
overran the arrays before. No per-thread array is then indexed at run time, and the model's register pricing is what
runs. (A data-dependent gather never reads a per-thread array: its table, a load or a view
of one, is read from global memory where used, model.kernel_model's unstaged arrays.)

`runtime_indexed` names the arrays a plain loop would have indexed at run time (an axis of
held_axes the diagram does not size); the lowering checks that every index it writes into
a register array is a constant of an unrolled loop (accum.local_index, N0604 otherwise).
"""

from __future__ import annotations

from ..diagrams.diagnostics import error
from . import ir, lanes

UNROLLED = 64    # trips of a static loop the lowering unrolls by itself (codegen/builder.loop)
FEW = lanes.UNROLL_TRIPS     # ... of a static lane-strided loop whose indices nvcc folds


def held_axes(g, kernel, st, woven, held=()) -> frozenset:
    """The axes kernel `kernel`'s per-thread register arrays run over (see the module
    docstring): of its streamed states (reductions and online softmaxes: their result's
    axes; statistics: their rows') and held reductions, those not woven."""
    woven = set(woven)
    out = set()
    for n, _ in st.reducers:
        out.update(ir.type_of(g, n).axes)
    for _, n in st.pairs:       # (the rescaled output; its (m, l) per row: fewer axes)
        out.update(ir.type_of(g, n).axes)
    for n, _ in tuple(st.stats) + tuple((h, 0) for h in held):
        op = ir.op(g, n)
        axes = ir.type_of(g, n).axes
        out.update(a for a in axes if not (isinstance(op, ir.Softmax) and a in op.axes))
    return frozenset(out - woven)


def runtime_indexed(model) -> frozenset:
    """The axes of model.held_axes whose size the diagram does not fix: a loop over one of
    them to its run-time size would index the arrays over it at run time (local memory);
    the lowering walks them in constant trips instead (constant_trips)."""
    return frozenset(a for a in model.held_axes if a not in model.fixed)


def static_walk(planned: int, ways: int) -> bool:
    """Whether a loop along a static axis of `planned` positions over `ways` lanes indexes its
    register arrays by constants (observed in the SASS: no LDL/STL): by ones at most UNROLLED
    trips (the lowering unrolls it), or from the lane by the lanes' stride at most FEW."""
    trips = -(-int(planned) // max(1, ways))
    return trips <= (FEW if ways > 1 else UNROLLED)


def constant_trips(model, axis: str, planned: int, ways: int) -> int | None:
    """The trips of a walk along `axis` that the lowering unrolls at a constant count (the
    planned extent of the arrays over it, over `ways` lanes), where a plain loop would index
    a per-thread array at run time: a run-time size (runtime_indexed), or a static one past
    static_walk; None where the plain loop indexes no such array or by constants."""
    if axis not in model.held_axes or (axis in model.fixed and static_walk(planned, ways)):
        return None
    return -(-int(planned) // max(1, ways))


def held_sizes(plan) -> tuple[tuple[str, int], ...]:
    """(axis, planned size) of every axis of a CUDA-core kernel's runtime_indexed, sorted: its
    arrays and walks have the planned extent, so a run may be smaller, never larger
    (`check`); and (axis, block tile) of the columns a tensor-core kernel's row statistics
    reduce in its epilogue (colstats.py: one block holds them all)."""
    out = {}
    for kp in plan.kernels:
        if kp.schedule.engine == "cuda cores":
            out.update((a, int(plan.sizes[a])) for a in runtime_indexed(kp.model))
        col = _columns(kp)
        if col is not None:     # (a block's fragments hold its statistics' columns whole)
            out[col] = min(out.get(col, 1 << 62), int(kp.schedule.block_tile()[col]))
    return tuple(sorted(out.items()))


def _columns(kp) -> str | None:
    """The axis a tensor-core kernel's row statistics reduce in its epilogue (colstats.py),
    whose run-time size its block tile bounds; None for any other kernel."""
    site = getattr(kp.schedule, "site", None)
    return site.col if getattr(site, "columns", ()) else None


def check(held, sizes: dict) -> None:
    """N0308 where `sizes` give an axis of `held` more positions than its kernel was planned
    for (its register arrays hold the planned extent)."""
    for a, v in held:
        if a in sizes and int(sizes[a]) > v:
            raise error("N0308", f"this kernel holds `{a}` in registers for {a} <= {v} and is "
                        f"called with {a} = {int(sizes[a])}",
                        help=f"plan for these sizes (napkin.compile's Kernel does, one kernel "
                        f"per size), or fix it with `axis {a} = {int(sizes[a])}` or -D")
