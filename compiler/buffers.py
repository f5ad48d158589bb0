"""The memory table of a kernel plan: every buffer, its role, its shape and where it lives.

Shapes are written in the relabelled axes of the paper (`g_q` for a group of
q, `s_x` for a chunk of x, `t_q` for a thread's share, `d` for a whole axis),
each with its size. Input tiles live at every level they pass through; values
and accumulators live at the lowest level (a thread's registers on a GPU).
"""

from __future__ import annotations

from .headpad import padded_extent
from .memory import buffer_bytes, in_place

ROLE = {"load": "input tile", "value": "intermediate", "accumulator": "accumulator"}


def buffers(plan, kp) -> list[dict]:
    """The memory table, from the schedule's placements (compiler/schedule.py)."""
    choice, sizes, tgt = kp.choice, plan.sizes, plan.target
    model = kp.model
    by_node = {arr.node: arr for arr in model.arrays}
    out = []
    staged = kp.schedule.tensor_cores and model.staged
    for pl in kp.schedule.placements:
        arr = by_node[pl.node]
        if staged and pl.level == 1 and pl.node in model.direct:
            continue    # read from global memory where the operand or statistic is computed
        if kp.schedule.tensor_cores and pl.level == 1 and pl.node in model.positions:
            continue    # a page table: read per row where its K and V rows are copied
        held, cov = dict(pl.held), dict(pl.covered)
        if pl.level == 1 and model.padded and kp.schedule.tensor_cores:   # as M counts it:
            held = {a: padded_extent(model.padded, arr.node, a, e)      # a head padded in
                    for a, e in held.items()}                            # shared memory
        # a grouped axis whose group is 1 (one position per block) is no dimension of a buffer
        ones = {a for a, g in choice.group if g == 1}
        shape = [[_label(a, pl.level, choice, sizes, held[a], cov[a]), _int(held[a])]
                 for a, _ in pl.held if a not in ones]
        count = 1
        for v in held.values():
            count *= v
        role = ROLE[pl.role]
        if pl.name.endswith(".stats"):
            role = "softmax state (m, l)" if pl.slots == 2 else role
        elif pl.role == "load" and pl.level > 1:
            role = "input slice" if arr.invariant else "operand (streamed)"
        size = count * pl.bytes * pl.slots
        if tgt.processors and pl.level < len(tgt.levels) - 1:   # as M counts it: aligned,
            size = buffer_bytes(size, arr, held, choice, kp.schedule.stages,  # rows,
                                sizes)                          # stages, peeled rows
        out.append({"name": pl.name, "role": role, "shape": shape,
                    "level": tgt.levels[pl.level].name, "bytes": int(size)})
    if staged:
        out[:0] = _staged(plan, kp)
    for arr in model.arrays:      # a gathered table read where used (memory.in_place): global
        if arr.table and kp.schedule.tensor_cores and in_place(arr, model, choice) \
                and arr.node not in model.positions:
            out.append({"name": arr.name, "role": "read per score via L1/L2",
                        "shape": [[a, sizes[a]] for a, _ in arr.table], "level": tgt.levels[0].name,
                        "bytes": int(arr.bytes * _product(sizes[a] for a, _ in arr.table))})
    if not kp.schedule.tensor_cores and tgt.processors and len(tgt.levels) > 2:
        from .across_warps import WARP, exchange_bytes
        from .choices import Choices
        exchanged = float(exchange_bytes(model, Choices.of(choice), sizes, kp.schedule.threads))
        if exchanged:
            warps = -(-kp.schedule.threads // WARP)
            out.append({"name": "warps' states", "role": "merged across warps",
                        "shape": [["warps", warps]], "level": tgt.levels[1].name,
                        "bytes": int(exchanged)})
    if kp.schedule.tensor_cores and model.columns and choice.warps:
        from . import column_epilogue
        merged = float(column_epilogue.shared_bytes(model, choice))
        if merged:      # (a product's row statistics over its columns: column_epilogue.py)
            row, col = model.columns[:2]
            out.append({"name": "rows' states", "role": "merged across warps",
                        "shape": [["warps", dict(choice.warps)[col]],
                                  [row, dict(choice.group)[row]]],
                        "level": tgt.levels[1].name, "bytes": int(merged)})
    return out


def _staged(plan, kp) -> list[dict]:
    """The shared-memory buffers of what a product computes as it stages, as M counts them
    (memory.staged_buffers)."""
    from .choices import Choices, NUMBERS
    from .memory import staged_buffers
    from .model import array_name
    choice, sizes = kp.choice, plan.sizes
    block = {a: dict(choice.group).get(a, sizes[a]) for a in sizes}
    out = []
    for n, held, size, operand in staged_buffers(kp.model, Choices.of(choice), block, NUMBERS,
                                                 kp.schedule.stages):
        shape = [[_label(a, 1, choice, sizes, e, e), _int(e)] for a, e in held.items()]
        out.append({"name": array_name(plan.graph, n),
                    "role": "operand computed as staged" if operand else "row statistic",
                    "shape": shape, "level": plan.target.levels[1].name, "bytes": int(size)})
    return out


def _label(axis: str, level: int, choice, sizes, res, cov) -> str:
    group = dict(choice.group)
    stream = choice.stream[0] if choice.stream else None
    if level == 1:
        if axis in group and group[axis] == 1:
            return axis
        if axis in group:
            return f"g_{axis}"
        if axis == stream:
            return f"s_{axis}"
        return axis
    threads = dict(choice.thread)
    if choice.inner and choice.inner[0] == axis:
        return f"u_{axis}"
    if res == 1:
        return axis if cov == 1 else f"1 of {axis}"
    if axis in threads and threads[axis] > 1:
        return f"t_{axis}"
    if choice.split and choice.split[0] == axis:
        return f"{_label(axis, 1, choice, sizes, res, cov)}/w_{axis}"
    return _label(axis, 1, choice, sizes, res, cov)


def _int(v) -> int:
    return int(v) if float(v).is_integer() else v


def _product(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out
