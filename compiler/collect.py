"""Python's cyclic garbage collector while planning.

Planning allocates millions of short-lived objects (candidate kernels, models, cost arrays)
and keeps few, and almost none of them in cycles: the young generations' collections find
what little there is. Each full collection, though, walks every object the process holds,
the memos of earlier plans among them (model_memo, kernel_plan._FOUND): a dozen of them were
a tenth of the transformer block backward's planning time. `fewer_full_collections` (a
decorator of the planning stages, plan.fuse_kernels and plan.tile) raises the oldest
generation's threshold while a stage runs and restores the thresholds after it; nothing a
plan computes depends on when memory is reclaimed. Stages running at once (threads, nested
stages) raise it once: the first to enter keeps the thresholds, the last to leave restores
them.
"""

from __future__ import annotations

import contextlib
import gc
import threading

# young collections before a full one (Python's default: 10; the youngest two generations'
# thresholds are left as they are)
OLDEST = 1000


_LOCK = threading.Lock()
_inside = 0                 # stages running now
_before: tuple = ()         # the thresholds when the first of them entered


@contextlib.contextmanager
def fewer_full_collections():
    global _inside, _before
    with _LOCK:
        if _inside == 0:
            _before = gc.get_threshold()
            gc.set_threshold(_before[0], _before[1], max(_before[2], OLDEST))
        _inside += 1
    try:
        yield
    finally:
        with _LOCK:
            _inside -= 1
            if _inside == 0:
                gc.set_threshold(*_before)
