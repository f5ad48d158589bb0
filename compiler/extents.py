"""Extents: per memory level, what one unit covers over its life and what an array holds
at once (the paper's relabellings, `group` and `stream`, as numbers; `cost.py`'s docstring
gives the rule). The cost model and the Schedule's placements read them from here, so the
two agree by construction."""

from __future__ import annotations

import numpy as np

from .choices import Choice, Choices, any_of, prod
from .model import Model

WARP = 32


def covered(model: Model, choice: Choice | Choices, sizes: dict, nlevels: int) -> list[dict]:
    """Per level below the top: axis -> extent one unit covers over its lifetime."""
    choice = Choices.of(choice)
    group, threads = dict(choice.group), dict(choice.thread)
    level1 = {a: group.get(a, sizes[a]) for a in model.axes}
    out = [level1]
    if nlevels > 2:
        level2 = dict(level1)
        for a, t in threads.items():
            level2[a] = t
        for a, w in choice.split:
            level2[a] = level1[a] / w
        out.append(level2)
    return out


def resident(arr, level: int, cov: dict, choice: Choice | Choices, reduced) -> dict:
    """Axis -> extent of `arr` held at once by one unit of `level` (1: block, 2: thread)."""
    stream_axis, chunk = choice.stream if choice.stream else (None, None)
    inner_axis, inner = choice.inner if choice.inner else (None, 1)
    out = {}
    for a in arr.axes:
        if a == stream_axis:
            out[a] = chunk if level == 1 else (inner if a == inner_axis else 1)
        elif level == 2 and a in reduced and (
                arr.role == "value" or
                arr.role == "load" and not (arr.invariant and stream_axis is not None)):
            out[a] = inner if a == inner_axis else 1
        else:
            out[a] = cov[a]
    return out


def walked(model: Model, short: list) -> dict:
    """Axis -> whether a unit walks it in a loop (per candidate): some load holds less of it
    than it covers (`short`: per array, axis -> whether it holds less; None but for loads).
    In the order of model.axes."""
    out: dict = {}
    for gaps in short:
        for a, gap in (gaps or {}).items():
            out.setdefault(a, []).append(gap)
    return {a: any_of(out[a]) for a in model.axes if a in out}


def step(axis: str, choice: Choices, level: int):
    """How far one loop step moves along a walked axis."""
    if level == 1 and choice.stream and choice.stream[0] == axis:
        return choice.stream[1]
    if level == 2 and choice.inner and choice.inner[0] == axis:
        return choice.inner[1]
    return 1


def launched_threads(model: Model, covs: list[dict]):
    """Threads per block as launched: each axis's thread count rounded up to whole threads,
    the block to whole warps (at least one)."""
    count = prod(np.ceil(np.asarray(covs[0][a] / covs[1][a], dtype=float) - 1e-9)
                 for a in model.axes)
    return np.maximum(WARP, np.ceil(count / WARP) * WARP)
