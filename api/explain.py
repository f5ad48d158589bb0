"""`napkin explain`: the plan as a report, in the paper's notation (text) or as JSON.

The report holds, per kernel, why it is split from its neighbours, the relabelled axes per
level (`q -> g_q = 128`), the memory table (every buffer: role, shape in relabelled axes,
level, bytes), M and H per level (symbolic and numeric), FLOPs, arithmetic intensity,
predicted time and its bound; the unfused plan's figures, what fusion saves, and a fused plan
not chosen (epilogue_stats.py)."""

from __future__ import annotations

import math

from .compiler import epilogue_stats, ir, local_merge, merge, pitch, rename, row_state, stored16
from .explain_units import model_units, seconds_text
from .compiler.buffers import buffers
from .compiler.engine import engine_buffers
from .compiler.formulas import relabelling, tile_values
from .compiler.plan import Plan, baseline, without_atomics
from .figures import figures
from .explain_split import split_lines as _split_lines, split_report as _split
from .explain_scatter import scatter_report
from .explain_engine import engine_report
from .explain_launch import launch_lines, launch_report
from .compiler.siblings import launch_of
from .compiler.model import array_name
from .compiler.schedule import ATTENTION, SCATTER


def report(plan: Plan, compare: bool = True) -> dict:
    """The plan as a dict (what --json prints); `compare`: also plan the unfused baseline
    (one kernel per equation) and report what fusion saves (explain asks; draw does not)."""
    tgt = plan.target
    kernels = []
    for i, kp in enumerate(plan.kernels):
        fig = figures(kp, tgt)
        levels = []
        for lc, (m_values, h_values, h_bytes) in zip(kp.cost.levels[1:], fig["levels"]):
            axes = {}
            for r in relabelling(kp.choice, kp.model, plan.sizes, tgt.level_names):
                if r.level != lc.name:
                    continue
                entry = {"kind": "group" if r.kind == "split" else r.kind, "size": r.size,
                         "symbol": r.symbol}
                if r.kind == "split":   # a reduced axis grouped over threads: partial states merge
                    entry["merge"] = True
                axes[r.axis] = entry
            levels.append({
                "level": lc.name, "capacity_bytes": int(lc.capacity), "M_bytes": int(lc.M),
                "H_bytes": float(lc.H), "units": float(lc.units), "time_seconds": float(lc.time),
                "axes": axes,
                "M_values_symbolic": m_values,
                "H_values_symbolic": h_values,
                "H_bytes_symbolic": h_bytes,
            })
        flops = float(sum(kp.cost.flops.values()))
        nested = dict(plan.graph.graph.get("nested", ()))
        top = kp.cost.levels[1]
        kernels.append({
            "name": kp.kernel.name,
            # a split's merge run by the partial kernel's last blocks (compiler/last_block.py)
            "run_by": next((plan.kernels[t.partial].kernel.name for t in plan.tails
                            if i in t.merges), None),
            # (a nested reduction's statement, compiler/nested.py, fused back into the kernel
            # of the statement it was cut from is part of that one: not listed)
            "equations": [_eq_name(plan, s) for s in kp.kernel.equations
                          if nested.get(s) not in kp.kernel.equations],
            # of those, the ones another kernel also computes (and stores): recomputed here
            # from this kernel's loads rather than loaded (compiler/fuse.py)
            "recomputes": [_eq_name(plan, s) for s in kp.kernel.recomputed],
            "reason": kp.kernel.reason,
            "streaming": _streaming(plan, kp),
            "engine": engine_report(plan, kp),
            "heaviest_first": list(kp.schedule.reversed),
            "levels": levels,
            "buffers": engine_buffers(plan, kp) or buffers(plan, kp),
            "tiles": {name: int(v) for name, v in tile_values(kp.choice).items()},
            "flops": flops,
            "flops_symbolic": fig["flops"],
            "arithmetic_intensity": flops / float(top.H) if top.H else None,
            "threads_per_block": kp.schedule.threads,
            "utilization": float(kp.cost.utilization),
            "predicted_seconds": float(kp.cost.time),
            "bound": kp.cost.bound,
            "terms_seconds": {k: float(v) for k, v in kp.cost.terms},
            "compute_seconds": {k: float(v) for k, v in kp.cost.compute_parts},
            "registers_estimated": (None if kp.cost.registers is None
                                    else int(round(float(kp.cost.registers)))),
            "blocks_per_sm": int(kp.cost.blocks_per_sm),
            "occupancy_limit": kp.cost.occupancy_limit,
        })
        if launch_of(plan.launches, i) is not None:    # (compiler/siblings.py)
            kernels[-1]["launch"] = launch_report(plan, i)
        local = local_merge.report(plan.graph, kp.kernel.nodes)
        if local:               # axes merged for this kernel's product (local_merge.py)
            kernels[-1]["local_merged"] = local
        if kp.schedule.engine == SCATTER:    # atomics at the gathered rows (scatter.py)
            kernels[-1].update(scatter_report(plan, kp))
    out = {
        "diagram": plan.diagram.name,
        "target": tgt.name,
        "target_description": tgt.description,
        "gpu": bool(tgt.processors),
        "sizes": merge.diagram_sizes(plan.graph, plan.sizes),
        "merged": merge.report(plan.graph, plan.sizes),
        "dynamic": [a for a, s in plan.diagram.axes.items()
                    if s is None or a in plan.specialised],
        "defaulted": list(plan.defaulted),
        "specialised": dict(plan.specialised),         # (compiler/specialise.py)
        "specialise_refused": plan.refused,
        # (null: the engine asked for refused them dynamic, specialise.decided)
        "unspecialised_seconds": None if plan.specialised and not plan.unspecialised
        else float(plan.unspecialised),
        "kernels": kernels,
        "split": _split(plan),
        "stored16": stored16.said(plan) + pitch.said(plan),   # (stored16.py; their rows, pitch.py)
        "renamed": rename.said(plan.graph) + _viewed(plan),   # (rename.py, flash.py)
        "predicted_seconds": float(plan.time),
        "H_bytes": sum(float(k.cost.levels[1].H) for k in plan.kernels),
    }
    if compare:     # (and a fused plan not chosen, priced: epilogue_stats.py)
        base, out["epilogue_statistics"] = baseline(plan), epilogue_stats.for_plan(plan)
        out["unfused"] = {"kernels": len(base),
                          "H_bytes": sum(float(k.cost.levels[1].H) for k in base),
                          "predicted_seconds": sum(float(k.cost.time) for k in base)}
        added = [name for k in kernels for name in k["engine"].get("added", ())] + \
            [name for k in kernels for name, _ in k["engine"].get("sums", ())]
        if added:      # the plan without atomics across blocks (chain.Across), for comparison
            apart = without_atomics(plan)
            out["apart"] = {"arrays": added, "kernels": len(apart.kernels),
                            "H_bytes": sum(float(k.cost.levels[1].H) for k in apart.kernels),
                            "predicted_seconds": float(apart.time)}
    return out


def _viewed(plan: Plan) -> list[str]:
    """One line per array an attention reads through a renaming view of its one stored copy,
    its readers naming its axes differently (flash.FlashSite.renamed)."""
    g = plan.graph
    return [f"{array_name(g, base)} read as `{array_name(g, base)}"
            f"[{' '.join(ir.type_of(g, n).axes)}]` by the attention of kernel {kp.kernel.name}: "
            "computed once, its tiles copied as stored (its readers name its axes differently)"
            for kp in plan.kernels if kp.schedule.engine == ATTENTION
            for n, base in getattr(kp.schedule.site, "renamed", ())]


def _eq_name(plan: Plan, stmt: int) -> str:
    """The equation's name (a split's partial side: `O.part`)."""
    return next((e.name for e in plan.graph.graph["equations"] if e.stmt == stmt), f"#{stmt}")


def _streaming(plan: Plan, kp) -> dict | None:
    st = kp.model.streaming
    if st.axis is None:
        return None
    g = plan.graph
    kinds = []
    # statistics FlashAttention reads from its online softmax's final state (row_state.py)
    site = getattr(kp.schedule, "site", None) if kp.schedule is not None else None
    state = dict(zip(getattr(site, "lse", ()), getattr(site, "lse_kinds", ())))
    kept = {n: k for n, k in kp.model.shared if n != k}    # (one state: score_states.py)
    for n, _ in st.reducers:
        op = ir.op(g, n)
        if n in state:
            kinds.append(f"{array_name(g, n)} = {row_state.SHOWN[state[n]]} read from the "
                         "final state (no accumulator)")
        elif n in kept:
            kinds.append(f"{array_name(g, n)} from {array_name(g, kept[n])}'s running max and "
                         "sum of exp (no accumulator)")
        elif n in dict(st.pairs).values():
            kinds.append("online softmax (running max m, running sum l, rescaled output o)")
        elif isinstance(op, ir.Reduce):
            kinds.append({"sum": "running sum", "max": "running max", "min": "running min",
                          "mean": "running sum and count", "var": "Welford (count, mean, M2)",
                          "logsumexp": "running max and sum of exp",
                          "argmax": "running max and its first position",
                          "argmin": "running min and its first position"}[op.fn])
        else:
            kinds.append("running sum of products")
    if st.stats:
        kinds.append("softmax statistics, then a second pass to normalise")
    out = {"axis": st.axis, "passes": st.passes, "accumulators": kinds, "skips": None}
    if kp.schedule is not None and kp.schedule.resident:    # (Schedule.resident)
        out["resident"] = True
    if kp.model.mask is not None:      # chunks the mask hides entirely are skipped
        from .compiler.fractions import data_inputs
        from .compiler.masking import describe
        shown, data = describe(kp.model.mask)
        given, missing = data_inputs(kp.model.mask)
        out["skips"] = {"condition": shown, "data_conjunct": data,
                        "computed_fraction": float(kp.cost.computed),
                        "visited_fraction": float(kp.cost.visited),
                        "data_given": list(given), "data_missing": list(missing)}
    return out


def specialised_lines(rep: dict, fmt) -> list[str]:
    """What compiler/specialise.py decided: the axes fixed, and the time they buy."""
    fixed = rep.get("specialised") or {}
    if not fixed:
        why = rep.get("specialise_refused")
        return [why] if why else []
    one = len(fixed) == 1
    said = ", ".join(f"{a} specialised at {v}" for a, v in fixed.items())
    dynamic = rep["unspecialised_seconds"]
    against = f"against {fmt(dynamic)} with {'it' if one else 'them'} dynamic" if dynamic \
        else f"(the engine asked for refuses {'it' if one else 'them'} dynamic)"
    return [f"{said} (dynamic in the diagram: each {'size' if one else 'combination of sizes'} "
            f"compiles its own kernel; predicted {fmt(rep['predicted_seconds'])} {against})"]


def render_text(rep: dict) -> str:
    units = model_units(rep)         # None on a GPU: predicted times are seconds

    def fmt(seconds: float) -> str:
        return seconds_text(seconds) if units is None else f"{seconds:.3g} model time units"

    lines = [f"napkin explain {rep['diagram']} on {rep['target']} ({rep['target_description']})"]
    sizes = "  ".join(f"{a}={v}" for a, v in rep["sizes"].items())
    note = (f" ({', '.join(rep['defaulted'])} at the default planning size; set sizes with --shape)"
            if rep.get("defaulted") else "")
    lines.append(f"sizes: {sizes}{note}")
    lines.extend(specialised_lines(rep, fmt))
    lines.extend(merge.describe(rep.get("merged", ())))
    if rep.get("split"):
        lines.extend(_split_lines(rep["split"], fmt))
    lines.extend(rep.get("stored16", ()))
    lines.extend(rep.get("renamed", ()))
    for k in rep["kernels"]:
        lines.append("")
        lines.append(f"kernel {k['name']}: computes {', '.join(k['equations'])}")
        lines.extend(f"  {line}" for line in k.get("local_merged", ()))
        if k.get("run_by"):
            lines.append(f"  run by kernel {k['run_by']}'s last block of each output tile, "
                         "after its partial states (no launch of its own)")
        elif k["reason"]:
            lines.append(f"  boundary: {k['reason']}")
        if k.get("launch"):
            lines.extend(launch_lines(k["name"], k["launch"], fmt))
        st = k["streaming"]
        if st:
            passes = f" in {st['passes']} passes" if st["passes"] > 1 else ""
            if st.get("resident"):
                passes += " (one chunk holds it: read once, the later passes read shared memory)"
            lines.append(f"  streams {st['axis']}{passes} through: " + "; ".join(st["accumulators"]))
            sk = st.get("skips")
            if sk:
                data = " (the rest of the mask, read from data, is tested per score)" \
                    if sk["data_conjunct"] else ""
                lines.append(f"  skips the chunks of {st['axis']} where {sk['condition']} holds "
                             f"nowhere: computes {sk['computed_fraction']:.0%} of the (block, "
                             f"chunk) pairs{data}")
                if sk.get("data_given") or sk.get("data_missing"):
                    read = ", ".join(sk["data_given"] + sk["data_missing"])
                    how = (f"counted on the values given for {', '.join(sk['data_given'])}"
                           if sk["data_given"] else "")
                    if sk["data_missing"]:
                        how += ("; " if how else "") + (
                            f"no values given for {', '.join(sk['data_missing'])}: counted as "
                            f"holding anywhere (--data NAME=FILE.npy plans on them)")
                    lines.append(f"    each block bounds its chunks by {read} first (a "
                                 f"prologue over {st['axis']}): {how}")
                elif sk.get("visited_fraction", 1.0) < 1.0:
                    lines.append(f"    each block's chunk loop runs from the first to the last "
                                 f"chunk the mask may hold in (a prologue over the chunks): "
                                 f"visits {sk['visited_fraction']:.0%} of the pairs")
        eng = k["engine"]
        if eng["kind"] == "tensor cores":
            what = "FlashAttention-2, " if eng["algorithm"] == "FlashAttention-2" else ""
            what = eng.get("what", what)        # (statistics alone: explain_engine.py)
            if eng["algorithm"] == "chain of products":
                added = "".join(
                    f"; {a} over the block's {eng['rows']}, each block's share added with "
                    f"atomics into f32 sums that a kernel after it converts" for a in eng["added"])
                added += "".join(f"; the sum {a}: {how}, into f32 sums that a kernel after it "
                                 f"converts" for a, how in eng.get("sums", ()))
                what = (f"a chain of products (per chunk of {eng['streamed']}: "
                        f"{', '.join(eng['scores'])}, then {', '.join(eng['outputs'])} over "
                        f"it{added}), ")
            if eng["algorithm"] == "sum of products":
                what = (f"a sum of {len(eng['summed'])} products ({' + '.join(eng['summed'])}: "
                        f"each pair's chunks of {eng['streamed']} in turn into the same "
                        "accumulators), ")
            if "warpgroups" in eng:     # wgmma (compiler/wgmma.py)
                lines.append(f"  on tensor cores: {eng['instruction']} ({eng['dtype']} -> "
                             f"{eng['accumulate']}, Hopper's warpgroup MMA, operands read from "
                             f"shared memory by descriptors), {eng['warpgroups']} warpgroup(s) "
                             f"along {eng['rows']}, each a {eng['warpgroup_tile'][0]} x "
                             f"{eng['warpgroup_tile'][1]} tile of {eng['rows']} x {eng['cols']}; "
                             f"chunks copied {eng['stages'] - 1} ahead by cp.async "
                             f"({eng['stages']} stages)")
            else:
                lines.append(f"  on tensor cores: {what}{eng['instruction']} ({eng['dtype']} -> "
                             f"{eng['accumulate']}), {eng['warps'][0]} x {eng['warps'][1]} warps "
                             f"over {eng['rows']} x {eng['cols']}, each a {eng['warp_tile'][0]} x "
                             f"{eng['warp_tile'][1]} tile of {eng['fragments'][0]} x "
                             f"{eng['fragments'][1]} fragments; chunks copied {eng['stages'] - 1} "
                             f"ahead by cp.async ({eng['stages']} stages)")
            lines.append("    shared tiles: " + ", ".join(
                f"{t['array']} [{t['rows']}][{t['row_values']}] {t['layout']}" +
                (f" ({t['xor']})" if "xor" in t else
                 f" (rows of {t['pitch']})" if t["layout"] == "padded" else "")
                for t in eng["tiles"]))
            lines.extend(f"    {line}" for line in eng.get("padded", ()))
            if eng.get("packed"):
                sizes = eng["packed"]
                rows = math.prod(n for _, n in sizes)
                lines.append(f"    rows packed: {' x '.join(a for a, _ in sizes)} = "
                             f"{' x '.join(str(n) for _, n in sizes)} = {rows}, in blocks of "
                             f"{eng['block_rows']} (each chunk of K and V read once for them)")
            if eng.get("column_blocks", 1) > 1:
                n = eng["column_blocks"]
                lines.append(f"    {eng['cols']} in tiles of {eng['warp_tile'][1]} across {n} "
                             f"blocks: each computes its rows' scores and softmax again ({n}x "
                             f"Q K, K read {n} times) and writes their logsumexp, the same")
            if eng.get("state"):        # (compiler/row_state.py)
                lines.append("    from the softmax's final state (maximum m, sum l), no "
                             "reduction of their own: " + ", ".join(
                                 f"{a} = {row_state.SHOWN[kind]}" for a, kind in eng["state"]))
            if eng.get("q_fragments") == "registers":
                lines.append("    Q's fragments held in registers for the whole key loop")
            elif eng.get("q_fragments"):
                lines.append("    Q re-read from shared memory every chunk (ldmatrix), freeing "
                             "its fragments' registers")
            if k.get("heaviest_first"):
                lines.append(f"    blocks launch the last {', '.join(k['heaviest_first'])} tiles "
                             "first (they run the most chunks: the heaviest first)")
        elif eng["kind"] == "scatter":
            lines.extend(f"  {line}" for line in eng["lines"])
        elif eng["why"] != "no contraction":
            lines.append(f"  on CUDA cores: {eng['why']}")
        for lv in k["levels"]:
            parts = []
            for a, info in lv["axes"].items():
                if info["kind"] == "whole":
                    parts.append(f"{a} whole ({info['size']})")
                elif info.get("merge"):
                    warps = f" ({info['size'] // 32} warps)" if info["size"] > 32 else ""
                    parts.append(f"{a} split over {info['symbol']} = {info['size']} threads"
                                 + warps)
                else:
                    parts.append(f"{a} -> {info['symbol']} = {info['size']}")
            if parts:
                per_warp = eng["kind"] == "tensor cores" and lv is k["levels"][-1]
                unit = "warpgroup" if "warpgroups" in eng else "warp"     # (wgmma's unit)
                lines.append(f"  {lv['level']:<10} " + "   ".join(parts)
                             + (f"   (per {unit})" if per_warp else ""))
        lines.append("  memory:")
        lines.append(f"    {'buffer':<14} {'role':<26} {'shape':<36} {'level':<10} {'bytes':>10}")
        for b in k["buffers"]:
            shape = "[" + " ".join(f"{n}={s}" if s is not None else n for n, s in b["shape"]) + "]"
            size = f"{b['bytes']:>10,}" if b["bytes"] is not None else f"{'symbolic':>10}"
            lines.append(f"    {b['name']:<14} {b['role']:<26} {shape:<36} {b['level']:<10} {size}")
        lines.append(f"    {'level':<10} {'M (bytes)':>12} {'capacity':>12} {'H (bytes)':>14}   H (values)")
        for lv in k["levels"]:
            lines.append(f"    {lv['level']:<10} {lv['M_bytes']:>12,} {lv['capacity_bytes']:>12,} "
                         f"{lv['H_bytes']:>14.4g}   {lv['H_values_symbolic']}")
        res = k.get("resources")
        if res:
            lines.append(f"  ptxas ({res['arch']}): {res['registers']} registers per thread, "
                         f"{res['spill_stores'] + res['spill_loads']} bytes of spills, "
                         f"{res['smem_bytes']:,} bytes of shared memory (plan: "
                         f"{k['levels'][0]['M_bytes']:,}), {res['stack_bytes']} bytes of stack")
            if "blocks_per_sm" in res:
                lines.append(f"    with ptxas's registers: {res['blocks_per_sm']} block(s) per SM "
                             f"limited by {res['occupancy_limit']} (plan: "
                             f"{k.get('registers_estimated')} registers, "
                             f"{k.get('blocks_per_sm')} block(s) per SM)")
        ai = k["arithmetic_intensity"]
        lines.append(f"  FLOPs {k['flops']:.4g} = {k['flops_symbolic']}")
        if ai is not None:
            lines.append(f"  arithmetic intensity {ai:.3g} FLOP/byte of global traffic")
        regs = (f", about {k['registers_estimated']} registers per thread"
                if k.get("registers_estimated") else "")
        blocks = k.get("blocks_per_sm", 1)
        busy = (f" ({k['threads_per_block']:.0f} threads per block{regs}, {blocks} block"
                f"{'s' if blocks != 1 else ''} per SM limited by {k.get('occupancy_limit')}, "
                f"{k['utilization']:.0%} of the GPU busy)" if rep["gpu"] else "")
        lines.append(f"  predicted {fmt(k['predicted_seconds'])}, bound by {k['bound']}{busy}")
    lines.append("")
    launches = sum(1 for k in rep["kernels"] if not k.get("run_by"))
    launched = f" in {launches} launch(es)" if launches != len(rep["kernels"]) else ""
    lines.append(f"total: {len(rep['kernels'])} kernel(s){launched}, H = {rep['H_bytes']:.4g} "
                 f"bytes, predicted {fmt(rep['predicted_seconds'])}")
    u = rep.get("unfused")
    if u is None:
        return "\n".join(lines + ([units] if units else []))
    lines += epilogue_stats.lines(rep.get("epilogue_statistics"), fmt)     # (not chosen)
    a = rep.get("apart")
    if a is not None:
        lines.append(f"without atomics ({', '.join(a['arrays'])} in kernels of their own): "
                     f"{a['kernels']} kernel(s), H = {a['H_bytes']:.4g} bytes, predicted "
                     f"{fmt(a['predicted_seconds'])}")
    lines.append(f"unfused: {u['kernels']} kernel(s), H = {u['H_bytes']:.4g} bytes, "
                 f"predicted {fmt(u['predicted_seconds'])}")
    if u["H_bytes"] > 0:
        lines.append(f"fusion moves {1 - rep['H_bytes'] / u['H_bytes']:.0%} fewer bytes and is "
                     f"{u['predicted_seconds'] / max(rep['predicted_seconds'], 1e-30):.2f}x faster")
    if units:
        lines.append(units)
    return "\n".join(lines)
