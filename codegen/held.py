"""What a CUDA-core thread holds in registers across its streamed loop, and what its points
share at each position of it (codegen/kernel.py).

The plan's register level (Schedule.placements) holds the slice of each load a thread
reads. A load placed there without the streamed axis (attention's Q: the thread's rows and
its lane's share of the head) is the same at every key of the loop; a streamed load's value
at one position (K's and V's at a key) is the same for every row of the thread. Where the
split axis the lanes walk at a point has static trips, a multiple of the lanes and at most
compiler/lanes.UNROLL_TRIPS each (`trips`), the lowering walks it unrolled, each trip at a constant offset
from the lane (`lane_offset`), so that

- a held load's values are read from shared memory once per block tile, before the passes,
  into named registers (`hold`), which the position body finds by node and index (`key`);
- a streamed load's value at a position is named once in the position's body and the
  thread's other points find it in the emitter's cache (KernelLowering.load).

Where the trips are not static (or too many), the walk stays a loop and every point reads
its own values, as before. (A reduction the plan holds, Model.held_values, is computed
before a pass: Registers.compute_held.)
"""

from __future__ import annotations

from ..compiler import ir, lanes, register_arrays
from . import cexpr
from . import program as P
from .builder import Ix

HELD_VALUES = 64       # values a thread holds across the streamed loop, at most


def trips(lw, axis: str) -> int | None:
    """The trips each lane makes along `axis` where the lowering unrolls its walk (the split
    axis, static, a multiple of the lanes, at most UNROLL_TRIPS each), else None."""
    if not lw.split or lw.split[0] != axis:
        return None
    size = lw.sizes[axis]
    return lanes.trips(int(size) if size.isdigit() else None, lw.ways)


def unrolled(lw, axis: str) -> int | None:
    """trips(), inside the streamed position body only (where the points share values), and
    where the lanes do not already walk another loop (KernelLowering.serial)."""
    return trips(lw, axis) if lw.in_chunk and not lw.serial else None


def lane_offset(lw, k: int) -> str:
    """The index of a lane's trip `k` along the split axis (the same text everywhere, so that
    a value read at it is found again by its index)."""
    return "lane" if k == 0 else f"(lane + {k * lw.ways})"


def key(n: int, axes, scope: dict) -> tuple:
    return (n,) + tuple(scope[a].expr for a in axes)


def held_loads(lw) -> list[int]:
    """Staged loads the schedule places at the register level without the streamed axis
    whose every other axis is woven or unrolled, when the thread's points hold at most
    HELD_VALUES of their values."""
    sched, r = lw.kp.schedule, lw.st.axis
    if r is None or not sched.placements:
        return []
    last = max(p.level for p in sched.placements)
    placed = {p.node for p in sched.placements
              if p.role == "load" and p.level == last and r not in dict(p.held)}
    out, count = [], 0
    for n in sorted(placed & lw.staging):
        axes = ir.type_of(lw.g, n).axes
        if r in axes or not all(a in lw.woven or trips(lw, a) for a in axes):
            continue
        values = len(lw.points)
        for a in axes:
            values *= 1 if a in lw.woven else trips(lw, a)
        if count + values > HELD_VALUES:
            continue
        out.append(n)
        count += values
    return out


def hold(lw) -> None:
    """Read each held load's values at the thread's points into registers (after the block
    has staged them), and record their names by node and index (`lw.held`)."""
    for n in held_loads(lw):
        axes = ir.type_of(lw.g, n).axes
        walked = [a for a in axes if a not in lw.woven]
        for pt in lw.points:
            for scope in _positions(lw, walked, dict(pt["scope"])):
                value = lw.load(n, scope)
                ctype = cexpr.CKIND[ir.kind_of_dtype(ir.type_of(lw.g, n).dtype)]
                lw.held[key(n, axes, scope)] = lw.b.value(ctype, value, "hq")


def _positions(lw, axes, scope):
    if not axes:
        yield scope
        return
    a, rest = axes[0], axes[1:]
    for k in range(trips(lw, a)):
        yield from _positions(lw, rest, {**scope, a: Ix(lane_offset(lw, k), str(k))})


def loops(lw, axes, scope, fn, roots=()) -> None:
    """Loops over `axes` at a point of kernel lowering `lw`, with register-array local indices.

    Lanes walk a split axis with stride w, all the same trips (the body may shuffle):
    past the end on a clamped index, `loop_guards` keeping them from storing. Static
    sizes give static trip counts: unrolled, register arrays stay in registers. What the
    body (`roots`) reduces over the split axis is computed before the lanes walk it: a
    lane inside holds only its own positions (a logsumexp over x read in a store over x)."""
    if not axes:
        fn(scope)
        return
    a, rest = axes[0], axes[1:]
    if roots and lw.split and lw.split[0] == a and not lw.serial:
        lw.emitter._hoist(list(roots), axes, scope)
    trips = unrolled(lw, a)
    if trips:      # each trip at its own constant offset from the lane (held.py), inline
        for k in range(trips):
            lw.loop_guards.append(None)
            lw.lane_at.append("lane")
            loops(lw, rest, {**scope, a: Ix(lane_offset(lw, k), str(k))}, fn, roots)
            lw.lane_at.pop()
            lw.loop_guards.pop()
        return
    k, var, size = lw.b.fresh("k"), lw.b.fresh("j"), lw.sizes[a]
    static = size.isdigit()
    w = lw.ways if lw.split and lw.split[0] == a else 1
    # a run-time size would index the register arrays over `a` at run time (local memory):
    # the planned extent's trips instead, unrolled, guarded (compiler/register_arrays.py)
    fixed = None if static else register_arrays.constant_trips(lw.model, a, lw.plan.sizes[a], w)
    raw = f"lane + {k} * {w}" if w > 1 else k
    ragged = (w > 1 and not (static and int(size) % w == 0)) or fixed is not None
    index = f"({raw} < {size} ? {raw} : {size} - 1)" if ragged else raw

    def body():
        lw.b.emit(P.Decl("const int", var, index))
        lw.loop_guards.append(f"({raw} < {size})" if ragged else None)
        # the lanes stand at different positions of `a` here (every lane makes the same
        # trips): a reduction over `a` nested in the body whose row depends on this
        # position (through a view) runs per lane (pinned), any other splits over them
        lw.lane_at.extend([var] if w > 1 else [])
        inner = lw._scoped(lambda: loops(lw, rest, {**scope, a: Ix(var, k)}, fn, roots))
        del lw.lane_at[len(lw.lane_at) - (w > 1):]
        lw.loop_guards.pop()
        lw.b.emit(P.Block(inner))
    trips = str(-(-int(size) // w)) if static else str(fixed) if fixed is not None else (
        f"({size} + {w - 1}) / {w}" if w > 1 else size)
    unroll = static or fixed is not None
    with lw.b.unrolling(k, unroll):
        inner = lw._scoped(body)
    lw.b.emit(P.For(k, "0", f"{k} < {trips}", f"++{k}", inner, unroll, "int"))



def constant_walk(lw, a: str, var: str, start: str, step: str, trips: int, fn) -> None:
    """A walk along `a` (scalar.Emitter._walk: from `start` by `step`) in `trips` unrolled
    trips, each position `var` guarded by the run-time size: fn(Ix) indexes its register
    arrays by the trip, a constant once unrolled, not by a position read at run time
    (compiler/register_arrays.py)."""
    k = lw.b.fresh("k")

    def trip():
        lw.b.emit(P.Decl("const int", var, f"{start} + {k} * {step}" if step != "1" else k))
        lw.b.emit(P.If(f"{var} < {lw.size(a)}", lw._scoped(lambda: fn(Ix(var, k)))))
    lw.b.loop(k, "0", str(trips), "1", trip, unroll=True)
