"""Why no tiling of a kernel fits (N0603): the smallest footprint its tilings reach, the level
it overflows, and a hinted size (or several together) that would fit, found by halving the
hints the user gave."""

from __future__ import annotations

from dataclasses import dataclass

from ..diagrams.diagnostics import NapkinError, error
from .cost import Choice, Cost, evaluate
from .kernels import FusedKernel
from .model import Model
from .pick import fits
from .search import SPLITS
from .target import Target


def why(target: Target, sizes: dict, k, tried, fixed, used) -> "Infeasible":
    """Why no tiling fits: the smallest footprint found, and a hinted size that would fit."""
    best = None
    for model, cols in tried:
        cost = minimal(target, sizes, model, cols, fixed)
        over = [lc for lc in cost.levels[1:] if lc.M > lc.capacity]
        if over and (best is None or over[0].M / over[0].capacity < best[1].M / best[1].capacity):
            best = (model, over[0], cols)
    if best is None:      # every level fits: the hints contradict the block's rules
        if used:
            return Infeasible(None, 0, 0, (
                "a thread's tile (`group a by N at registers`) is at most its block's "
                f"group, a block has at most {target.max_threads_per_block} threads; "
                "relax or drop a hint"), used[0])
        return Infeasible(None, 0, 0, "try a larger target", None)
    model, lc, cols = best

    def fitting(pairs) -> bool:      # with these hinted sizes, do the smallest tiles fit?
        return fits(minimal(target, sizes, model, cols, _with_sizes(sizes, fixed, pairs)))
    for h in used:
        size = h.size
        while size // 2 >= _least(h):
            size //= 2
            if fitting([(h, size)]):
                return Infeasible(lc.name, lc.M, lc.capacity,
                                   f"`{h.kind} {h.axis} by {size}{_at(target, h)}` (or less) "
                                   "would fit", h)
    if used:                 # no single hint suffices: all of them together?
        sized = [(h, h.size) for h in used]
        while any(n > _least(h) for h, n in sized):
            sized = [(h, max(_least(h), n // 2)) for h, n in sized]
            if fitting(sized):
                return Infeasible(lc.name, lc.M, lc.capacity, " and ".join(
                    f"`{h.kind} {h.axis} by {n}{_at(target, h)}`" for h, n in sized)
                    + " (or less) would fit", used[0])
        return Infeasible(lc.name, lc.M, lc.capacity,
                           "relax the schedule hints, make a whole axis smaller with -D, "
                           "or stream it", used[0])
    return Infeasible(lc.name, lc.M, lc.capacity,
                       "make a whole axis smaller with -D, or stream it", None)

def _at(target: Target, h) -> str:
    return f" at {target.level_names[h.level]}" if h.level > 1 else ""

def _with_sizes(sizes: dict, fixed: dict, pairs) -> dict:
    """The fixed decisions with these (hint, size) pairs in place (past the axis: whole)."""
    trial = {**fixed}
    for h, n in pairs:
        key, n = _KEY[(h.kind, min(h.level, 2))], min(n, sizes[h.axis])
        if key in ("group", "thread"):
            trial[key] = {**trial.get(key, {}), h.axis: n}
        else:
            trial[key] = (h.axis, n)
    return trial

def minimal(target: Target, sizes: dict, model: Model, cols, fixed) -> Cost:
    """The cost of the smallest tiles the fixed choices allow."""
    fixed_threads = fixed.get("thread", {})
    group = {a: max(fixed.get("group", {}).get(a, 1), fixed_threads.get(a, 1))
             for a in model.woven}
    stream = None
    if model.streaming.axis:
        stream = fixed["stream"] if fixed.get("stream") else (model.streaming.axis, 1)
    thread = ()
    if len(target.levels) > 2:
        cap = target.max_threads_per_block
        block = 1
        for g in group.values():
            block *= g
        t = {a: fixed_threads.get(a, 1) for a in group}
        for a in sorted(group, key=lambda a: -group[a]):
            if a in fixed_threads:
                continue
            while block > cap and t[a] < group[a]:
                t[a] *= 2
                block = 1
                for b, g in group.items():
                    block *= -(-g // t[b])
        thread = tuple(sorted(t.items()))
    choice = Choice(tuple(sorted((a, g) for a, g in group.items() if g < sizes[a])),
                    stream, thread, None, fixed.get("inner"))
    return evaluate(model, cols, choice, sizes, target)


# which fixed decision of the search a hint sets, by (kind, level: 1 blocks, 2 threads)
_KEY = {("group", 1): "group", ("group", 2): "thread", ("stream", 1): "stream",
        ("stream", 2): "inner", ("lanes", 1): "split"}


def _least(h) -> int:
    """The smallest size a hint of h's kind can ask for: a lanes hint splits over 2 lanes or
    more (search.SPLITS), the others may be 1."""
    return SPLITS[0] if h.kind == "lanes" else 1


@dataclass(frozen=True)
class Infeasible:
    level: str | None
    needed: float
    capacity: float
    fix: str
    hint: object

    def error(self, k: FusedKernel, target: Target) -> NapkinError:
        span = self.hint.info.span if self.hint is not None and self.hint.info else None
        if self.level is None:
            why = " with these schedule hints" if self.hint is not None else ""
            return error("N0603", f"no tiling of kernel {k.name} fits the target {target.name}"
                         f"{why}", span, help=self.fix)
        return error("N0603", f"kernel {k.name} needs {int(self.needed):,} bytes of {self.level} "
                     f"per {_unit(target, self.level)} even with the smallest tiles, but "
                     f"{self.level} holds {int(self.capacity):,}", span, help=self.fix)


NO_TILING = Infeasible(None, 0, 0, "", None)   # fusion's quick estimate found none


def _unit(target: Target, level: str) -> str:
    return target.level(level).unit or "unit"
