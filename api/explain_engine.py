"""explain's engine section of a kernel: what computes its contraction, the tensor cores
(FlashAttention-2, a chain of products, a matrix product on mma.sync or wgmma: its warps,
tiles and shared layouts) or the CUDA cores (and why)."""

from __future__ import annotations

import math

from .compiler import headpad, tensorcore
from .compiler.model import array_name
from .compiler.plan import Plan


def _tiles(plan: Plan, sched) -> list[dict]:
    """Each staged operand tile's shared layout (Schedule.layouts, compiler/tilelayout.py):
    its rows and values a row, swizzled (the XOR's row term), plain or padded."""
    out = []
    for n, lay in sched.layouts:
        one = {"array": array_name(plan.graph, n), "rows": lay.outer, "row_values": lay.inner,
               "pitch": lay.pitch, "layout": lay.kind}
        if lay.mask:
            term = f"(row >> {lay.shift})" if lay.shift else "row"
            one["xor"] = f"16-byte chunk ^= {term} & {lay.mask}"
        if lay.block:       # (a wgmma operand: TileLayout.block)
            one["xor"] = one.get("xor", "") + f", in blocks of {lay.block} values a row"
        out.append(one)
    return out


def _padded(plan: Plan, kp) -> list[str]:
    """The heads the site pads in shared memory and the tensor work that adds
    (compiler/headpad.py): explain's lines."""
    work = {w.node: w.flops_per_point * math.prod(plan.sizes.get(a, 1) for a in w.axes)
            for w in kp.model.work if w.engine == "contraction"}
    return headpad.describe(kp.schedule.site, plan.sizes, work)


def engine_report(plan: Plan, kp) -> dict:
    """What computes the kernel's contraction: tensor cores (how) or CUDA cores (why)."""
    fm, fn, fk = tensorcore.FRAGMENT
    instruction = f"mma.sync.aligned.m{fm}n{fn}k{fk}"
    sched = kp.schedule
    if sched.tensor_cores:
        found = sched.site
        wm, wn, tm, tn = sched.warp_layout()
        tiles = _tiles(plan, sched)
        if isinstance(found, tensorcore.FlashSite):
            alone = found.out is None       # row statistics of scores alone (flash_alone.py)
            if alone:                       # (a warp's tile: its rows by the chunk's keys)
                tn = 0
                shown = [tm, sched.stream[1]]
            else:
                shown = [tm, tn]
            what = {"what": f"FlashAttention-2 without P V (row statistics of the scores alone: "
                            f"per chunk of {found.red}, S = Q K on the tensor cores and each "
                            "row's running maximum m and sum l of exp(S - m) updated on its "
                            "fragments; no O, no second product), "} if alone else {}
            return {"kind": "tensor cores", **what,
                    "algorithm": "FlashAttention-2" + (" without P V" if alone else ""),
                    "instruction": instruction, "dtype": found.dtype, "accumulate": "f32",
                    "rows": found.row, "cols": found.red if alone else found.dv,
                    "warps": [wm, 1],
                    "warp_tile": shown, "fragments": [shown[0] // fm, shown[1] // fn],
                    # O's columns in tiles across blocks (flash.COLUMNS): the blocks along
                    # them each compute the scores again; 1 where a block holds the head
                    "column_blocks": -(-found.width // tn) if tn else 1,
                    "stages": sched.stages, "tiles": tiles,
                    # Q's A fragments: held for the key loop, or re-read every chunk
                    "q_fragments": "shared memory" if sched.reread else "registers",
                    # rows over several axes of Q (compiler/packing.py): [axis, size] each,
                    # the block's rows
                    "packed": [[a, int(plan.sizes[a])] for a in found.packed],
                    "block_rows": int(sched.block_tile()[found.row]),
                    "padded": _padded(plan, kp),
                    # row statistics stored from the softmax's final state (row_state.py):
                    # [array, kind] each
                    "state": [[array_name(plan.graph, n), kind]
                              for n, kind in zip(found.lse, found.lse_kinds)]}
        if isinstance(found, tensorcore.ChainSite):
            g = plan.graph
            width = max(headpad.extent(found, p.node, p.e, p.width) for p in found.outs)
            return {"kind": "tensor cores", "algorithm": "chain of products",
                    "instruction": instruction, "dtype": found.dtype, "accumulate": "f32",
                    "rows": found.row, "cols": found.outs[0].e, "warps": [wm, 1],
                    "warp_tile": [tm, width], "fragments": [tm // fm, width // fn],
                    "streamed": found.red,
                    "scores": [array_name(g, s.node) for s in found.scores],
                    "outputs": [array_name(g, p.node) for p in found.outs],
                    # products over the rows, each block's share added with atomics
                    "added": [array_name(g, a.store) for a in found.across],
                    # stored sums of the chunk's values, added the same way (chain_sums.py)
                    "sums": [[array_name(g, m.store), _sum_kind(found, m)] for m in found.sums],
                    "stages": sched.stages, "tiles": tiles, "padded": _padded(plan, kp)}
        if sched.instruction == "wgmma":     # (compiler/wgmma.py): warpgroups of 64 x N
            return {"kind": "tensor cores", "algorithm": "matrix product",
                    "instruction": f"wgmma.mma_async.sync.aligned.m64n{tn}k16",
                    "dtype": found.dtype, "accumulate": "f32", "rows": found.row,
                    "cols": found.col, "warpgroups": wm, "warpgroup_tile": [tm, tn],
                    "stages": sched.stages, "tiles": tiles}
        # a sum of products (compiler/sums.py): every pair's chunks into the same fragments
        summed = [array_name(plan.graph, n) for n in (found.node, *(p[0] for p in found.pairs))]
        return {"kind": "tensor cores",
                "algorithm": "sum of products" if found.pairs else "matrix product",
                "instruction": instruction,
                "dtype": found.dtype, "accumulate": "f32", "rows": found.row, "cols": found.col,
                "warps": [wm, wn], "warp_tile": [tm, tn], "fragments": [tm // fm, tn // fn],
                "stages": sched.stages, "tiles": tiles,
                **({"summed": summed, "streamed": found.red} if found.pairs else {}),
                **(_duals(plan.graph, found) if found.duals else {})}
    found = tensorcore.best_site(plan.graph, kp.kernel, plan.target, plan.sizes)
    if not isinstance(found, str):
        why = ("tensor cores are off" if not plan.tensor_cores else
               "predicted faster on the CUDA cores at these sizes")
    else:
        why = found
    return {"kind": "cuda cores", "why": why}


def _duals(g, site) -> dict:
    """Products sharing one chunk loop, each into accumulators of its own (compiler/duals.py)."""
    names = [array_name(g, n) for n in (site.node, *(d[0] for d in site.duals))]
    shared = [array_name(g, n) for n in dict.fromkeys(
        x for _, a, b in ((site.node, site.a, site.b),) + site.duals for x in (a, b))
        if sum(n in (a, b) for _, a, b in ((site.node, site.a, site.b),) + site.duals) > 1]
    return {"algorithm": "products sharing a chunk loop", "products": names,
            "what": f"{len(names)} products ({', '.join(names)}) in one chunk loop of "
                    f"{site.red}, each into accumulators of its own"
                    + (f" ({', '.join(shared)} staged once for all)" if shared else "") + ", "}


def _sum_kind(site, m) -> str:
    """How a chain's stored sum (chain_sums.Summed) is added across blocks, in words."""
    if site.red in m.axes:
        return "each chunk's values added with atomics (one add per element of the chunk)"
    if site.row in m.axes:
        return "summed over the chunks per row, one add per lane and row"
    return "summed over the block's chunks in registers and over the warp, one add per warp"

