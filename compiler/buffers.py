"""The memory table of a kernel plan: every buffer, its role, its shape and where it lives.

Shapes are written in the relabelled axes of the paper (`g_q` for a group of
q, `s_x` for a chunk of x, `t_q` for a thread's share, `d` for a whole axis),
each with its size. Input tiles live at every level they pass through; values
and accumulators live at the lowest level (a thread's registers on a GPU).
"""

from __future__ import annotations

from .cost import covered, resident

ROLE = {"load": "input tile", "value": "intermediate", "accumulator": "accumulator"}


def buffers(plan, kp) -> list[dict]:
    model, choice, sizes, tgt = kp.model, kp.choice, plan.sizes, plan.target
    nlevels = len(tgt.levels)
    covs = covered(model, choice, sizes, nlevels)
    reduced = set(model.reduced)
    out = []
    for li in range(1, nlevels):
        last = li == nlevels - 1
        level = tgt.levels[li].name
        cov = covs[li - 1]
        for arr in model.arrays:
            if arr.role == "store" or (arr.role != "load" and not last):
                continue
            res = resident(arr, li, cov, choice, reduced)
            shape = [[_label(a, li, choice, sizes, res[a], cov[a]), _int(res[a])] for a in arr.axes]
            count = 1
            for v in res.values():
                count *= v
            role = ROLE[arr.role]
            if arr.name.endswith(".stats"):
                role = "softmax state (m, l)" if arr.slots == 2 else role
            elif arr.role == "load" and li > 1:
                role = "input slice" if arr.invariant else "operand (streamed)"
            out.append({"name": arr.name, "role": role, "shape": shape, "level": level,
                        "bytes": int(count * arr.bytes * arr.slots)})
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
