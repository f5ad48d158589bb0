"""CUDA-core stores that copy a row of a load: a thread's consecutive points moved 16 bytes at
a time.

A store whose value is a load read through a gather or a view at the same position of the
store's contiguous (last) axis, in the load's storage dtype (embedding's `X[t m] =
E[tok[t] m]`: a part of row tok[t] of E at each t), copies values without computing them. A
thread whose points are `width` consecutive positions of that axis (`width` values 16
bytes, its other axes one position each) reads them with one 16-byte load and writes them
with one 16-byte store (codegen/kernel.py), where the axis's size is a multiple of the width
(every run then lies wholly inside or wholly outside the array, aligned: the launchers align
every array to 16 bytes); a runtime size is tested once per run, the run copied one value
at a time in a rolled loop where it is not a multiple. Without a stream or a split (the
epilogue stores the thread's points). Which stores copy a row is the kernel's
(model.copied_rows: Model.rows); which of them a plan copies in runs is decided here, once
(Schedule.runs); the cost model prices the same candidates (issue_simt.ROW_RUN).
"""

from __future__ import annotations

RUN_BYTES = 16
COPIED = ("f16", "bf16", "f32")      # a float through f32 and back is the same bits


def runs(rows, sizes: dict, tile: dict, thread: dict, woven, stream,
         split) -> tuple[tuple[int, int], ...]:
    """(store, values per run) of the stores `rows` (model.copied_rows's) each thread writes
    in runs: its points `width` consecutive positions of the store's axis (woven: the threads'
    fastest, codegen/kernel._order; the block tile a multiple of the width, so every run
    starts aligned), one position of every other; no stream, no split; the axis's size (the
    plan's) a multiple of the width, else value by value all the same."""
    if stream is not None or split is not None or not woven:
        return ()
    return tuple((n, width) for n, axis, width in rows
                 if axis in woven and thread.get(axis, 1) == width and tile[axis] % width == 0
                 and sizes[axis] % width == 0
                 and all(thread.get(a, 1) == 1 for a in woven if a != axis))
