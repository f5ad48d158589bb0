"""A masked sum that is a scatter-add: recognised, costed, and chosen against its dense plan.

The gradient of a gather (compiler/gradpositions.py) is written as what it is, a sum over
the positions T that read the array of a `where` that matches each position's index to a
row of the gradient:

    dE[v m] = sum[t](where(tok[t] == v, dX[t m], 0))

Planned densely, every (v, m) looks at every t. The same sum is a scatter-add: one thread
per position of T and of the value's other axes K (here m), which computes the index and
adds the value into row `tok[t]` with an atomic (`atomicAdd`), moving each value once.

The form recognised (`site`): a kernel that stores one `sum[T](e)`, where `e` is
`where(c, value, 0)`, possibly multiplied by other factors; `c` a conjunction of
`idx == v` for distinct output axes v (the matched axes V, each an `Index` on one side and an
integer expression over T and K on the other) and of guards over T and K alone; nothing in
the kernel reduces but the sum itself. An index outside `0..size(v) - 1` (negative ones too)
matches no v, so the dense form adds nothing there: the scatter skips it (docs/gradients.md).

Lowering (codegen/scatter.py): the kernel adds into an f32 scratch array the launchers zero
once (`Program.zeroed`, as a last-block merge's counters); a second kernel converts each
element into the output's dtype and sets the scratch back to zero for the next launch.
Atomics on the 16-bit output itself (`atomicAdd(__half2*)`) would round after every add:
with many duplicate indices (a frequent token) the sum loses its low bits.

Cost (`cost`): the loads read once (a gathered one: once per position), the atomics at the
target's L2 rate (`[l2] atomics`, an assumption to calibrate), the scratch's lines through
HBM, then the conversion kernel (read and clear the scratch, write the output). The planner
(kernel_plan.py) takes the scatter when its predicted time is below the dense plan's; the
decision is `Choice.scatter`, and `schedule.build` makes it a Schedule of engine SCATTER.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import ir, occupancy
from .cost import LAUNCH_SECONDS, Cost, LevelCost
from .model import BYTES, storage_dtype

THREADS = 256          # a scatter block: one position per thread
_PLAIN = (ir.Map, ir.View, ir.Gather, ir.Assign, ir.Index, ir.SizeOf, ir.Const, ir.Input)


@dataclass(frozen=True)
class ScatterSite:
    """What the scatter kernel computes: at each position of `axes` (T then K, the value's
    innermost last), the product of `factors` added at row `index` of each matched axis when
    every index is inside its axis and every guard holds."""
    store: int                              # the kernel's stored node (the sum's array)
    reduce: int                             # the sum
    factors: tuple[int, ...]                # the value: their product
    matched: tuple[tuple[str, int], ...]    # (output axis v, the node its row is read from)
    guards: tuple[int, ...]                 # conditions over T and K
    summed: tuple[str, ...]                 # T
    axes: tuple[str, ...]                   # T and K, outermost first

    @property
    def kept(self) -> tuple[str, ...]:
        return tuple(a for a in self.axes if a not in self.summed)


def _through(g, n: int) -> int:
    """Through named arrays, whatever their layout (positions are by axis name)."""
    while isinstance(ir.op(g, n), ir.Assign):
        n = ir.operands(g, n)[0]
    return n


def _is_map(g, n: int, fn: str) -> bool:
    op = ir.op(g, n)
    return isinstance(op, ir.Map) and op.fn == fn


def _masked(g, n: int):
    """(condition, factors) of `where(c, a, 0)` times other factors, or None."""
    n = _through(g, n)
    if _is_map(g, n, "where"):
        c, a, b = ir.operands(g, n)
        zero = ir.op(g, _through(g, b))
        if isinstance(zero, ir.Const) and zero.value == 0:
            return c, (a,)
        return None
    if _is_map(g, n, "mul"):
        x, y = ir.operands(g, n)
        for one, other in ((x, y), (y, x)):
            found = _masked(g, one)
            if found is not None:
                return found[0], found[1] + (other,)
    return None


def _conjuncts(g, c: int) -> list[int]:
    c = _through(g, c)
    if _is_map(g, c, "and"):
        return [m for a in ir.operands(g, c) for m in _conjuncts(g, a)]
    return [c]


def _axes(g, n: int) -> set[str]:
    return set(ir.type_of(g, n).axes)


def site(g, k) -> ScatterSite | None:
    """The scatter form of kernel k (see the module docstring), or None."""
    if len(k.stores) != 1 or not k.loads:
        return None
    store = k.stores[0]
    r = _through(g, store)
    op = ir.op(g, r)
    if not (isinstance(op, ir.Reduce) and op.fn == "sum") or r not in k.nodes:
        return None      # (a sum is a float, of integers too: docs/language.md)
    if any(not isinstance(ir.op(g, n), _PLAIN) for n in k.nodes if n != r):
        return None      # a reduction of its own in the value: the kernel's dense plan
    found = _masked(g, ir.operands(g, r)[0])
    if found is None:
        return None
    cond, factors = found
    out = ir.type_of(g, r).axes
    summed = tuple(op.axes)
    matched, guards = {}, []
    for c in _conjuncts(g, cond):
        pair = _match(g, c, out, summed)
        if pair is not None and pair[0] not in matched:
            matched[pair[0]] = pair[1]
        else:
            guards.append(c)
    if not matched:
        return None
    kept = [a for a in out if a not in matched]
    space = set(summed) | set(kept)
    if any(not _axes(g, c) <= space for c in guards) or \
            any(not _axes(g, i) <= space for i in matched.values()) or \
            any(not _axes(g, f) <= space | set(matched) for f in factors):
        return None
    layout = ir.type_of(g, _through(g, factors[0])).axes
    axes = sorted(space, key=lambda a: (layout.index(a) if a in layout else -1,
                                        a not in summed, a))
    return ScatterSite(store, r, tuple(factors), tuple(sorted(matched.items())), tuple(guards),
                       summed, tuple(axes))


def _match(g, c: int, out, summed):
    """(v, index node) when condition c is `index == v` for an output axis v not summed."""
    if not _is_map(g, c, "eq"):
        return None
    a, b = ir.operands(g, c)
    for one, other in ((a, b), (b, a)):
        idx = ir.op(g, one)
        if isinstance(idx, ir.Index) and idx.axis in out and idx.axis not in summed \
                and idx.axis not in _axes(g, other) \
                and ir.kind_of_dtype(ir.type_of(g, other).dtype) == "int":
            return idx.axis, other
    return None


def blocks(axes, sizes: dict) -> tuple[tuple[str, int], ...]:
    """Each axis's block tile, the innermost first filling THREADS threads (a block covers
    whole rows of the innermost axes, and one position of the outer ones)."""
    left, tile = THREADS, {}
    for a in reversed(axes):
        tile[a] = max(1, min(sizes[a], left))
        left = max(1, left // tile[a])
    return tuple((a, tile[a]) for a in axes)


def cost(g, k, found: ScatterSite, sizes: dict, target) -> Cost | None:
    """The predicted cost of the scatter and its conversion kernel (None: the target has
    no atomics rate, or no grid)."""
    if not target.processors or not target.l2_atomics:
        return None
    positions = math.prod(sizes[a] for a in found.axes)
    read = 0.0
    for n in k.loads:
        t = ir.type_of(g, n)
        read += min(math.prod(sizes[a] for a in t.axes), positions) * BYTES[storage_dtype(g, n)]
    rows = math.prod(sizes[a] for a in ir.type_of(g, found.store).axes)
    touched = min(positions, rows)
    hbm = target.levels[1].bandwidth
    # the scratch's lines the atomics touch come from HBM and go back (beyond L2)
    spill = 0.0 if rows * 4 <= target.l2_bytes / 2 else 2 * 4 * touched
    # atomics at one address wait for each other: with the indices spread evenly, each
    # element takes positions / rows of them, one per clock at its L2 slice (an assumption)
    serial = positions / rows / target.clock_hz
    scatter = max((read + spill) / hbm, positions / target.l2_atomics, serial)
    out_bytes = BYTES[storage_dtype(g, found.store)]
    finish_bytes = rows * (4 + 4 + out_bytes)        # read the scratch, clear it, write out
    finish = finish_bytes / hbm
    time = scatter + finish + 2 * LAUNCH_SECONDS
    H = read + spill + finish_bytes
    terms = (("HBM", (read + spill + finish_bytes) / hbm),
             ("atomics", max(positions / target.l2_atomics, serial)))
    bound = "atomics at L2" if terms[1][1] > terms[0][1] else "HBM"
    levels = [LevelCost(target.levels[0].name, target.levels[0].capacity_bytes, 0.0, 0.0, 1, 0.0)]
    levels.append(LevelCost(target.levels[1].name, target.levels[1].capacity_bytes, 0.0, H,
                            -(-positions // THREADS), H / hbm))
    for lv in target.levels[2:]:
        levels.append(LevelCost(lv.name, lv.capacity_bytes, 4.0 * (2 + len(found.matched)),
                                positions * 4.0, positions, 0.0))
    flops = {"simt_f32": float(positions * len(found.factors))}
    # its blocks hold no shared memory; registers unestimated (a few: an index, a value)
    per_sm, limit = occupancy.blocks_per_sm(target, 0, THREADS, None)
    return Cost(tuple(levels), flops, 0.0, time, bound, 1.0, THREADS, terms,
                registers=None, blocks_per_sm=per_sm, limit=limit)
