"""The fastest tilings of a tensor-core site in order, as the search prices them: what
benchmarks/gpu_check.py times to check the model's ranking, and what a sibling tiled to share
a launch picks from (sibling_tiles.py)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

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
    found = _priced(model, cols, target, sizes, where, fixed)
    if found is None:
        return []
    candidates, cost = found
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


_PRICED: OrderedDict = OrderedDict()   # what `_price` answered, by what it reads
_MAX_PRICED = 256


def _priced(model: Model, cols, target: Target, sizes: dict, where, fixed: dict | None):
    """_price's (candidates, their costs), memoised on what it reads (the model but for the
    kernel it names, as search.searched): a sibling tiled at each thread count
    (sibling_tiles.tiled_at) ranks the same candidate set four times, and a plan made again
    ranks it again. The arrays are shared: read them, do not write them."""
    try:
        key = (replace(model, kernel=None), cols, target, tuple(sizes.items()), where,
               repr(fixed))
        found = _PRICED.get(key, _PRICED)
    except TypeError:             # (a model or site that cannot be a key: priced)
        return _price(model, cols, target, sizes, where, fixed)
    if found is _PRICED:
        found = _PRICED[key] = _price(model, cols, target, sizes, where, fixed)
        if len(_PRICED) > _MAX_PRICED:
            _PRICED.popitem(last=False)
    else:
        _PRICED.move_to_end(key)
    return found


def _price(model: Model, cols, target: Target, sizes: dict, where, fixed: dict | None):
    """(the site's candidate set, evaluate's costs of it), or None where it has none."""
    module = flash if isinstance(where, FlashSite) else chain if isinstance(where, ChainSite) \
        else None
    more = {"columns": flash.column_tiles(where, model)} if module is flash else {}
    found = (module.candidate_set if module else candidate_set)(sizes, where, fixed or {}, **more)
    if found is None:
        return None
    candidates, _ = found
    return candidates, evaluate(model, cols, candidates, sizes, target)
