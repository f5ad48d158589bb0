"""What a tensor-core product's row statistics over its columns (compiler/colstats.py,
codegen/column_stats.py) add to its kernel's price after the product loop: one definition,
read by the cost model (cost.evaluate) wherever such a kernel is priced, the planner's
search and explain's fused figure (epilogue_stats.py) alike.

After the last chunk each lane folds its fragment elements into per-row states (the
statistics' per-element work), merges them across the 4 lanes of a quad (2 shuffle rounds,
a shuffle and 3 instructions each) and, with warps side by side along the columns, through
shared memory (a store, a barrier, a load and 3 instructions): nothing of the block
overlaps that (only the other blocks resident on its SM), so its issue slots add to the
kernel's time rather than hide under the tensor pipe's. The shared-memory buffers of the
merge across warps (one f32 per state slot, warp along the columns and row of the block's
tile) sit after the pipeline's stages: the block's footprint and its occupancy count them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .model import Model, _slots

QUAD = 2 * 4        # warp instructions per state and row a lane holds: the quad's merge
ACROSS = 6          # ... and the merge across warps along the columns through shared memory
STATE_BYTES = 4     # one f32 per state slot


def columns(g, row: str, col: str, stats) -> tuple:
    """Model.columns of a product of rows `row` whose statistics `stats` (nodes) reduce `col`
    in its epilogue: (row, col, the state slots of each, the ops computed per element of the
    tile)."""
    from . import ir
    from .graph import ancestors
    ops = set()
    for n in stats:
        ops |= ancestors(g, n) | {n}
    product = {n for n in ops if isinstance(ir.op(g, n), ir.Contract)}
    for n in product:
        ops -= ancestors(g, n) | {n}
    return (row, col, tuple(_slots(ir.op(g, n)) for n in stats), frozenset(ops))


def _warps(model: Model, choice):
    """(row axis, warps along the rows, warps along the columns) of the kernel's choice."""
    row, col = model.columns[:2]
    warps = dict(choice.warps)
    return row, warps[row], warps[col]


def shared_bytes(model: Model, choice):
    """Shared memory per block of the merge across warps along the columns (0 with one)."""
    if not model.columns or not choice.warps:
        return 0.0
    row, _, wn = _warps(model, choice)
    rows = dict(choice.group)[row]
    return np.where(np.asarray(wn) > 1, sum(model.columns[2]) * wn * rows * STATE_BYTES, 0.0)


def epilogue_work(model: Model) -> tuple[bool, ...]:
    """Per Work of the model, whether the epilogue computes it (per element of the tile)."""
    ops = model.columns[3] if model.columns else frozenset()
    return tuple(w.node in ops for w in model.work)


def loop_issue(model: Model, extents, run):
    """The issue seconds of the kernel without its epilogue's per-element work: `run(model,
    extents=...)` is issue.compute on the kernel's choice, `extents` each Work's."""
    out = epilogue_work(model)
    kept = replace(model, work=tuple(w for w, o in zip(model.work, out) if not o))
    return run(kept, extents=[e for e, o in zip(extents, out) if not o])["issue"]


def seconds(model: Model, choice, target, issue_all, issue_loop, blocks, per_sm):
    """Seconds the epilogue adds after the product loop: its per-element work's issue slots
    (`issue_all` - `issue_loop`: the model's issue part with and without it) and the merges of
    each row's states, over the GPU's issue rate, less what the other blocks resident on an SM
    (`per_sm`) issue meanwhile; `blocks`: the blocks launched."""
    if not model.columns or not choice.warps:
        return 0.0
    row, wm, wn = _warps(model, choice)
    held = np.asarray(dict(choice.thread)[row]) / 8     # rows a lane holds (2 a fragment)
    per_warp = len(model.columns[2]) * held * (QUAD + np.where(np.asarray(wn) > 1, ACROSS, 0))
    rate = target.per_second("schedulers") or float("inf")
    merges = per_warp * wm * wn * blocks / rate
    return (issue_all - issue_loop + merges) / np.maximum(1, per_sm)


__all__ = ["columns", "shared_bytes", "epilogue_work", "loop_issue", "seconds", "STATE_BYTES"]
