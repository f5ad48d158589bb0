"""The plan's columns: the order in which a kernel loads, computes and stores.

Columns are the paper's device for counting memory: each column is a moment
in the kernel, with the arrays resident at the fast level then and the values
that cross into or out of it. M is the largest resident total over columns.
An array is resident from the column that makes it (a load, a compute) until
the column that last uses it, which consumes it (the paper's boxes turn their
inputs into their outputs); a stored array is resident in its store column.
A value is stored in the column right after the one that computes it, as the
emitted CUDA stores it, so a stored value lives until then, not to the end of
the kernel (a streamed accumulator is stored after its loop, at the end).
When an axis streams, accumulators live through the whole kernel (the loop
spans the columns).
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import DiGraph

from . import ir
from .model import Model


@dataclass(frozen=True)
class Column:
    label: str
    resident: tuple[int, ...]     # indices into model.arrays
    loads: tuple[int, ...]        # arrays crossing in at this column
    stores: tuple[int, ...]       # arrays crossing out at this column
    in_loop: bool = False         # runs once per chunk of the streamed axis


def columns(g: DiGraph, model: Model) -> tuple[Column, ...]:
    arrays = model.arrays
    by_node: dict[int, list[int]] = {}
    for i, a in enumerate(arrays):
        by_node.setdefault(a.node, []).append(i)
    accumulators = tuple(i for i, a in enumerate(arrays) if a.role == "accumulator")
    loads = [i for i, a in enumerate(arrays) if a.role == "load"]
    stores = [i for i, a in enumerate(arrays) if a.role == "store"]
    computed = [i for i, a in enumerate(arrays) if a.role in ("value", "accumulator")]
    steps: list[tuple[str, list[int], list[int], list[int]]] = []
    streaming = model.streaming.axis is not None
    invariant = [i for i in loads if not arrays[i].streamed]
    streamed = [i for i in loads if arrays[i].streamed]
    if invariant:
        steps.append(("load " + ", ".join(arrays[i].name for i in invariant), invariant, [], []))
    if streamed:
        steps.append(("load " + ", ".join(arrays[i].name for i in streamed), streamed, [], []))
    stored_at: dict[int, int] = {}       # stored array -> its store step
    for i in computed:
        a = arrays[i]
        if a.name.endswith(".stats"):
            continue
        steps.append((f"compute {a.name}", [], [i] + [j for j in by_node[a.node] if j != i
                                                     and arrays[j].role != "store"], []))
        now = [j for j in by_node[a.node] if j in stores and j not in stored_at]
        if now and not (streaming and a.role == "accumulator"):
            stored_at.update((j, len(steps)) for j in now)
            steps.append(("store " + ", ".join(arrays[j].name for j in now), [], [], now))
    rest = [i for i in stores if i not in stored_at]
    if rest:
        stored_at.update((j, len(steps)) for j in rest)
        steps.append(("store " + ", ".join(arrays[i].name for i in rest), [], [], rest))
    # liveness: first and last step each array is touched
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for s, (_, ld, made, st) in enumerate(steps):
        for i in ld + made + st:
            first.setdefault(i, s)
            last[i] = s
    for s, (_, _, made, _) in enumerate(steps):
        for i in made:
            node = arrays[i].node
            for m in _operand_arrays(g, node, by_node, arrays):
                last[m] = max(last.get(m, s), s)
    for i in stores:
        same = [j for j in by_node[arrays[i].node] if j != i]
        for j in same:
            last[j] = max(last.get(j, 0), stored_at[i])
    live_at: list[set] = [set() for _ in steps]   # each array at its first step and until its last
    for i, s in first.items():
        for t in range(s, max(s + 1, last[i])):
            live_at[t].add(i)
    out = []
    for s, (label, ld, made, st) in enumerate(steps):
        live = live_at[s]
        if streaming:
            live |= set(accumulators)
        stored_values = {j for i in st for j in by_node[arrays[i].node] if arrays[j].role != "store"}
        live |= stored_values
        live = sorted(i for i in live
                      if not (arrays[i].role == "store" and _computed_here(i, arrays, by_node)))
        in_loop = model.streaming.axis is not None and (
            any(arrays[i].streamed for i in ld + made + st))
        out.append(Column(label, tuple(live), tuple(ld), tuple(st), in_loop))
    return tuple(out)


def _computed_here(i, arrays, by_node) -> bool:
    """A stored array also computed in the kernel is counted once (as the value)."""
    return any(arrays[j].role in ("value", "accumulator") for j in by_node[arrays[i].node] if j != i)


def _operand_arrays(g, node, by_node, arrays) -> list[int]:
    """Arrays (of the model) that the op at `node` reads, looking through free and named ops."""
    found, stack, seen = [], list(ir.operands(g, node)), set()
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        if m in by_node and any(arrays[j].role != "store" for j in by_node[m]):
            found.extend(j for j in by_node[m] if arrays[j].role != "store")
        else:
            stack.extend(ir.operands(g, m))
    return found


def resident_sets(cols, held: dict, symbolic: bool) -> list[tuple[int, ...]]:
    """The columns whose totals M is the largest of, as the arrays counted at this level:
    each distinct set once, and on numbers only the sets no other set contains (sizes are
    never negative, so a contained set never totals more). Memoised on what they depend
    on: the columns' resident arrays (kernels of one shape share them) and which arrays a
    level counts, not the sizes."""
    key = (tuple(col.resident for col in cols), tuple(held), symbolic)
    found = _RESIDENT_SETS.get(key)
    if found is None:
        if len(_RESIDENT_SETS) > 4096:
            _RESIDENT_SETS.clear()
        found = _RESIDENT_SETS[key] = _resident_sets(cols, held, symbolic)
    return found


# (each column's resident arrays, arrays counted, symbolic) -> their sets
_RESIDENT_SETS: dict = {}


def _resident_sets(cols, held, symbolic: bool) -> list[tuple[int, ...]]:
    sets = list(dict.fromkeys(tuple(i for i in col.resident if i in held) for col in cols))
    if symbolic:
        return sets
    members = [frozenset(s) for s in sets]
    return [s for s, m in zip(sets, members) if not any(m < other for other in members)]
