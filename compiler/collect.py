"""Python's cyclic garbage collector while planning.

Planning allocates millions of short-lived objects (candidate kernels, models, cost arrays)
and keeps few, and almost none of them in cycles: the young generations' collections find
what little there is. Each full collection, though, walks every object the process holds,
the memos of earlier plans among them (model_memo, kernel_plan._FOUND): a dozen of them were
a tenth of the transformer block backward's planning time. `fewer_full_collections` (a
decorator of the planning stages, plan.fuse_kernels and plan.tile) raises the oldest
generation's threshold while a stage runs and restores the thresholds after it; nothing a
plan computes depends on when memory is reclaimed.
"""

from __future__ import annotations

import contextlib
import gc

# young collections before a full one (Python's default: 10; the youngest two generations'
# thresholds are left as they are)
OLDEST = 1000


@contextlib.contextmanager
def fewer_full_collections():
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], max(before[2], OLDEST))
    try:
        yield
    finally:
        gc.set_threshold(*before)
