"""explain's section of a scatter-add kernel (compiler/scatter.py, engine SCATTER): what it
adds where, why the planner took it over the dense masked sum, and its traffic."""

from __future__ import annotations

from .compiler import ir
from .explain_units import seconds_text
from .compiler.kernel_plan import KernelPlanner
from .compiler.model import BYTES, array_name, storage_dtype


def scatter_report(plan, kp) -> dict:
    """The entries of explain's kernel report that a scatter-add replaces."""
    g, site, sizes, tgt = plan.graph, kp.schedule.scatter, plan.sizes, plan.target
    dense = KernelPlanner(g, tgt, sizes, plan.hints, plan.engine, scatter=False).plan(
        kp.kernel, strict=False)
    out_name = array_name(g, site.store)
    out_axes = ir.type_of(g, site.store).axes
    rows = ", ".join(f"{v} at {array_name(g, idx)}" for v, idx in site.matched)
    positions = " x ".join(site.axes)
    lines = [f"scatter-add: a thread per ({', '.join(site.axes)}) adds its value with atomicAdd "
             f"(f32) into an f32 scratch of {out_name} at the row its index gives ({rows}); an "
             f"index outside its axis (negative too) adds nothing, as the masked sum defines",
             f"then a conversion kernel writes {out_name} "
             f"({storage_dtype(g, site.store)}) and sets the scratch back to zero",
             "why: the dense masked sum has every (" + ", ".join(out_axes) + ") look at every "
             f"({', '.join(site.summed)}): " + (
                 f"predicted {seconds_text(dense.cost.time)} against {seconds_text(kp.cost.time)} scattered"
                 if dense is not None else "no dense tiling of it fits")]
    loads = [(array_name(g, n), "*".join(ir.type_of(g, n).axes) or "1",
              BYTES[storage_dtype(g, n)]) for n in kp.kernel.loads]
    per = [f"{b}*{a}" for _, a, b in loads]
    rows_expr = "*".join(out_axes)
    ob = BYTES[storage_dtype(g, site.store)]
    levels = []
    for lc in kp.cost.levels[1:]:
        top = lc is kp.cost.levels[1]
        levels.append({"level": lc.name, "capacity_bytes": int(lc.capacity), "M_bytes": int(lc.M),
                       "H_bytes": float(lc.H), "units": float(lc.units),
                       "time_seconds": float(lc.time), "axes": {},
                       "M_values_symbolic": "", "H_bytes_symbolic": "",
                       "H_values_symbolic": (" + ".join(per) + f" + {8 + ob}*{rows_expr} (bytes: "
                                             "loads once, scratch read and cleared, output)"
                                             if top else f"{'*'.join(site.axes)} (atomics)")})
    buffers = [{"name": array_name(g, n), "role": "input (read once)",
                "shape": [[a, sizes[a]] for a in ir.type_of(g, n).axes], "level": "global",
                "bytes": int(BYTES[storage_dtype(g, n)]
                             * _prod(sizes[a] for a in ir.type_of(g, n).axes))}
               for n in kp.kernel.loads]
    buffers.append({"name": out_name + ":scratch", "role": "f32 sums (atomics)",
                    "shape": [[a, sizes[a]] for a in out_axes], "level": "global",
                    "bytes": int(4 * _prod(sizes[a] for a in out_axes))})
    flops = float(sum(kp.cost.flops.values()))
    return {"engine": {"kind": "scatter", "why": "scatter-add", "lines": lines},
            "streaming": None, "levels": levels, "buffers": buffers, "tiles": {},
            "flops": flops, "flops_symbolic": f"{len(site.factors)}*" + "*".join(site.axes),
            "arithmetic_intensity": flops / float(kp.cost.levels[1].H) if kp.cost.levels[1].H
            else None, "positions": positions, "registers_estimated": None,
            "dense_seconds": None if dense is None else float(dense.cost.time)}


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out

