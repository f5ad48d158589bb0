"""What explain says of a split (docs/splits.md): the relabelling of the reduced axis, the
partial states in global memory, and who merges them (merge kernels, or the partial kernel's
last block of each output tile), with what the split gained by the quick estimates."""

from __future__ import annotations

from .compiler import ir
from .compiler.plan import Plan


def split_report(plan: Plan) -> dict | None:
    """The split of a reduced axis across blocks: its relabelling, the partial-state arrays
    (in global memory between the partial and the merge kernels), and what it gained."""
    if plan.split is None:
        return None
    first, *more = (_report(plan, s, next((t for t in plan.tails if t.axis == s.axis), None))
                    for s in plan.split.each())
    # further splits of other kernels alone (compiler/kernel_split.py: each its own axis)
    return {**first, "also": more} if more else first


def _report(plan: Plan, s, tail) -> dict:
    from .runtime.dtypes import numpy_dtype
    g = plan.graph
    partials = []
    for name in s.partials:
        t = ir.type_of(g, g.graph["arrays"][name])
        count = 1
        for a in t.axes:
            count *= plan.sizes[a]
        partials.append({"name": name, "shape": [[a, int(plan.sizes[a])] for a in t.axes],
                         "dtype": t.dtype, "level": plan.target.level_names[0],
                         "bytes": int(count * numpy_dtype(t.dtype).itemsize)})
    merging = [kp.kernel.name for kp in plan.kernels if s.part_axis in kp.kernel.reduced(g)]
    last_block = None if tail is None else {
        "partial": plan.kernels[tail.partial].kernel.name,
        "merges": [plan.kernels[i].kernel.name for i in tail.merges],
        "tile": [[a, int(plan.kernels[tail.partial].schedule.block_tile()[a])]
                 for a in tail.axes],
        "blocks_per_tile": tail.blocks, "asked": tail.forced,
        "saved_seconds": float(tail.saved)}
    return {"axis": s.axis, "parts": s.parts, "part_axis": s.part_axis,
            "share_axis": s.share_axis, "share": s.share, "hinted": s.forced,
            "partials": partials, "merged_by": merging, "last_block": last_block,
            "estimated_seconds": s.time, "unsplit_estimated_seconds": s.unsplit_time,
            "alone": None if s.alone is None else {
                "arrays": list(s.alone.arrays), "unsplit_kernels": list(s.alone.kernels),
                "busy": s.alone.busy, "unsplit_seconds": s.alone.unsplit,
                "split_seconds": s.alone.split}}


def split_lines(sp: dict, fmt) -> list[str]:
    return [line for one in (sp, *sp.get("also", ())) for line in _lines(one, fmt)]


def _lines(sp: dict, fmt) -> list[str]:
    how = "hinted" if sp["hinted"] else "chosen by the planner"
    lines = [f"split: {sp['axis']} -> {sp['part_axis']} = {sp['parts']} splits x "
             f"{sp['share_axis']} = {sp['share']} ({how})"]
    one = sp.get("alone")
    if one is not None:
        names = ", ".join(one["arrays"])
        why = "as hinted" if sp["hinted"] else "fewer blocks than the SMs hold: few " \
            "outputs for what it reduces"
        lines.append(f"  in {names} alone, the reductions of kernel "
                     f"{', '.join(one['unsplit_kernels'])} of the unsplit plan ({one['busy']:.0%} "
                     f"of the GPU busy, {why}); the other kernels keep "
                     f"their statements; that kernel {fmt(one['unsplit_seconds'])} unsplit, "
                     f"its partial and merge kernels {fmt(one['split_seconds'])} (final plans)")
    for b in sp["partials"]:
        shape = "[" + " ".join(f"{a}={n}" for a, n in b["shape"]) + "]"
        lines.append(f"  partial state  {b['name']:<12} {shape} {b['dtype']} in {b['level']}, "
                     f"{b['bytes']:,} bytes")
    lb = sp.get("last_block")
    if lb is None:
        lines.append(f"  merged by kernel {', '.join(sp['merged_by']) or '(none)'}")
    else:
        tile = " ".join(f"{a}={n}" for a, n in lb["tile"])
        how = "asked for" if lb["asked"] else f"predicted {fmt(lb['saved_seconds'])} faster " \
            "than launching the merge"
        lines.append(f"  merged in kernel {lb['partial']} by the last of the {lb['blocks_per_tile']} "
                     f"blocks of each output tile [{tile}] to finish (a counter per tile): "
                     f"{', '.join(lb['merges'])} {'runs' if len(lb['merges']) == 1 else 'run'} "
                     f"there, not launched ({how})")
    if sp["unsplit_estimated_seconds"] is not None:
        t, u = sp["estimated_seconds"], sp["unsplit_estimated_seconds"]
        lines.append(f"  quick estimates: {fmt(t)} split, {fmt(u)} for the best unsplit plan "
                     f"({u / max(t, 1e-30):.2f}x)")
    return lines
