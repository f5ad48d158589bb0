"""FLOPs: what a kernel's ops compute per engine and dtype (a contraction 2 per product term,
other ops their model.ELEMENT_FLOPS), and the rate each engine runs them at (the target's
[compute] table): the paper's compute term, which the targets without an issue table (the
abstract model, the toy) price time by, and which explain prints."""

from __future__ import annotations

from .choices import Choices, prod
from .model import Model
from .target import Target


def work_extents(model: Model, level1: dict, choice: Choices, sizes: dict) -> list[tuple]:
    """(points, redo) of each op of model.work: the points it computes, and how many times
    the blocks compute each (the grouped axes it lacks: every group along them computes it
    again); the cost model's FLOPs and instruction counts (issue.py) both read them."""
    grouped = {a for a, _ in choice.group}
    redos: dict = {}        # (the axes of an op) -> its redo: ops over the same axes share it
    out = []
    for w in model.work:
        redo = redos.get(w.axes)
        if redo is None:
            redo = redos[w.axes] = prod(sizes[a] / level1[a] for a in model.axes
                                        if a in grouped and a not in w.axes)
        points = prod(sizes[a] for a in w.axes)
        if w.prefix:        # a scan's folds: (size + 1) / 2 a point along its axis
            points = points * prod((sizes[a] + 1) / 2 for a in w.prefix)
        out.append((points, redo))
    return out


def work_flops(model: Model, level1: dict, choice: Choices, sizes: dict, fraction=1.0,
               extents: list | None = None) -> dict:
    """FLOPs per (engine, dtype); the work of chunks a mask hides counts `fraction`
    (`extents`: work_extents's, when the caller has them)."""
    stream = choice.stream[0] if choice.stream else None
    out: dict = {}
    if extents is None:
        extents = work_extents(model, level1, choice, sizes)
    for w, (points, redo) in zip(model.work, extents):
        key = (w.engine, w.dtype)
        amount = w.flops_per_point * points * redo
        amount = amount * w.times if w.times != 1 else amount
        if stream in w.axes and not (isinstance(fraction, float) and fraction == 1.0):
            amount = amount * fraction
        out[key] = out[key] + amount if key in out else amount
    return out


def rate(target: Target, key, tensor_cores: bool, instruction: str = "mma.sync") -> float:
    """FLOP/s of an (engine, dtype): the tensor cores' for a contraction they run (mma.sync's
    `tensor_<dtype>` or wgmma's `wgmma_<dtype>`), else the CUDA cores' f32 rate."""
    engine, dtype = key
    if tensor_cores and engine == "contraction" and target.engine_for("contraction", dtype):
        found = target.rate(f"{'wgmma' if instruction == 'wgmma' else 'tensor'}_{dtype}")
        if found:
            return found
    return target.rate("simt_f32") or 1.0
