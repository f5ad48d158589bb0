"""The fastest tilings of a tensor-core site in order, as the search prices them: what
benchmarks/gpu_check.py times to check the model's ranking, and what a sibling tiled to share
a launch picks from (sibling_tiles.py)."""

from __future__ import annotations

import numpy as np

from . import chain, flash, warps
from .chain import ChainSite
from .cost import Choice, Cost, evaluate
from .flash import FlashSite
from .model import Model
from .pick import fits
from .target import Target
from .tensorcore import candidate_set


def ranked(model: Model, cols, target: Target, sizes: dict, where, count: int = 8,
           fixed: dict | None = None, threads: int | None = None) -> list[tuple[Choice, Cost]]:
    """The `count` fastest tilings that fit, fastest first, as the search costs them (what
    benchmarks/gpu_check.py times to check the model's ranking); `threads`: only those of
    blocks of that many threads (a sibling tiled to share a launch: sibling_tiles.py)."""
    module = flash if isinstance(where, FlashSite) else chain if isinstance(where, ChainSite) \
        else None
    more = {"columns": flash.column_tiles(where, model)} if module is flash else {}
    found = (module.candidate_set if module else candidate_set)(sizes, where, fixed or {}, **more)
    if found is None:
        return []
    candidates, _ = found
    cost = evaluate(model, cols, candidates, sizes, target)
    ok = fits(cost) if threads is None else fits(cost) & (cost.threads == threads)
    time = np.broadcast_to(np.where(ok, cost.time, np.inf), candidates.shape).ravel()
    out = []
    for i in np.argsort(time, kind="stable")[:count]:
        if not np.isfinite(time[i]):
            break
        one = candidates.at(int(i))
        w = dict(one.warps)
        out.append((warps.tiled_choice(dict(one.group), sizes, one.stream, dict(one.thread), w,
                                       tuple(w), one.reread), cost.at(int(i), candidates.shape)))
    return out
