"""The memory table of a kernel plan: every buffer, its role, its shape and where it lives.

Shapes are written in the relabelled axes of the paper (`g_q` for a group of
q, `s_x` for a chunk of x, `t_q` for a thread's share, `d` for a whole axis),
each with its size. Input tiles live at every level they pass through; values
and accumulators live at the lowest level (a thread's registers on a GPU).
"""

from __future__ import annotations

from .memory import buffer_bytes

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
        held, cov = dict(pl.held), dict(pl.covered)
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
            size = buffer_bytes(size, arr, held, choice, kp.schedule.stages)  # rows, stages
        out.append({"name": pl.name, "role": role, "shape": shape,
                    "level": tgt.levels[pl.level].name, "bytes": int(size)})
    if staged:
        out[:0] = _staged(plan, kp)
    return out


def _staged(plan, kp) -> list[dict]:
    """The shared-memory buffers of what a product computes as it stages (Model.staged):
    each computed operand's tile, each statistic's row buffer, as M counts them
    (memory.staged_bytes)."""
    from .choices import Choices, NUMBERS
    from .memory import ALIGN_PAD, allocated
    from .model import Array, array_name
    choice, sizes, g = kp.choice, plan.sizes, plan.graph
    chunk = dict([choice.stream])
    group = dict(choice.group)
    out = []
    for n, axes, _, _, operand in kp.model.staged:
        held = {a: chunk.get(a, group.get(a, sizes[a])) for a in axes}
        rows = [a for a in axes if a not in chunk] if not operand else list(axes)
        shape = [[_label(a, 1, choice, sizes, held[a], held[a]), _int(held[a])] for a in rows]
        count = 1
        for a in rows:
            count *= held[a]
        if operand:
            tile = Array(n, "", "load", tuple(axes), 2, streamed=True)
            size = allocated(count * 2, tile, held, Choices.of(choice), NUMBERS,
                             kp.schedule.stages)
            role = "operand computed as staged"
        else:
            size, role = count * 4 + ALIGN_PAD, "row statistic"
        out.append({"name": array_name(g, n), "role": role, "shape": shape,
                    "level": plan.target.levels[1].name, "bytes": int(size)})
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
