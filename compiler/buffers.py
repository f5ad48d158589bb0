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
    for pl in kp.schedule.placements:
        arr = by_node[pl.node]
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
