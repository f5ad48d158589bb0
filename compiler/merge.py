"""Merged axes: axes that always travel together become one axis (a reshape, free at run time).

`O[t h d] * W[h d m]` contracts over `h d`, adjacent and in the same order in O and W, so its
memory is exactly that of a matrix product with k = h*d. Held as two axes, a kernel streams
one and holds or groups the other, and a contraction over two axes runs on the CUDA cores
(6.29 ms at t=m=4096, h=32, d=128 on h100, model); merged into one axis `(h*d)` it is one
tensor-core matrix product (the model's figure of `A[t k] * B[k m]` at k = 4096).

A chain of axes a1 .. an merges when it is exactly a reshape of every array of the IR:
- every node whose type has one of them (inputs, intermediates as the IR lays them out,
  outputs) has all of them, adjacent, in that order;
- every op that names axes (a contraction, reduction, softmax) names all of them or none;
- none of them is read as a value (`Index`: masks, positions, `mod(x, P)`), by `size(x)`,
  by a view or a gather (a renaming, a diagonal `A[i i]`, computed positions), by a scan or
  an index reduction (argmax's result is a position along its axes), or named by a hint
  (`group`/`stream`/`split` in the diagram or `keep`: the command line's).
Merging axes an op names is always taken: a kernel then streams, holds or splits one axis where
it had two (no library plan moves). Free axes merge too (`X[b t k] * W[k m]`: the rows of one
product are b*t; 385 us -> 26 us at b=64, t=3, k=m=4096 on h100, model), but a merged free axis
tiles differently (a tile of b*t against a tile of t with b grouped: at odd sizes its tails
may cost more, gqa and paged attention at 77/130 on two-level 7% and 20%), so fusion
(`plan.fuse_kernels`) prices the IR with and without the free merges and keeps the merged one
where it is predicted at least `MARGIN` (5%) faster.

Free axes of an attention's query rows (GQA's `r q`) are left to packing.py, which packs them
into the fragment rows in the lowering (also under a causal mask over q and in a split
decode, where a merge could not apply): `_attention_rows`.

Axes adjacent in both operands of one contraction but not in every array (`A[b t h d] *
Wo[h d m]` beside `Q[b h t d]`) are merged for that product alone: local_merge.py.

The merged axis is named `(a1*..*an)` (a name no diagram axis has, unlike packing's `(r q)`; axis names never reach the
generated C, where sizes are parameters `n<i>`), its `Axis.merged` holds the chain, and its size
is the product (static when every part is, else computed per call by `split.complete_sizes`,
with planning sizes alike). `g.graph["merged"]` lists the merges for `explain`. The runtime
binds a call's arrays by the diagram's own shapes (`runtime/bind.py`); row-major contiguous
arrays are already the merged arrays in memory, and the backends that index arrays by shape
reshape them (`shaped`). `merge_axes` is a pure function: it returns a new graph.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .graph import DiGraph

from . import ir

_NAMING = (ir.Contract, ir.Reduce, ir.Softmax)     # ops whose axes a chain joins whole
# free merges are taken where fusion predicts them this much faster: below it the user's axes
# stay, as explain, hints and tile choices name them (attention's batch axes `b h` merged
# gained 0.006-0.07% on hopper-toy, model, and renamed every choice over them); fusion's quick
# tile searches are a few % off the final one (`erf(H[t o])` at 4096^2 on h100: merged 3.2%
# faster quick, 0.1% final), so the margin is above that
MARGIN = 0.05


def name(chain: tuple[str, ...]) -> str:
    """The merged axis's name: `(h*d)` (packed fragment rows are `(r q)`, packing.name's: a
    merged axis among them is one of their parts, never split by packing.parts)."""
    return f"({'*'.join(chain)})"


def _attention_rows(g: DiGraph) -> set[str]:
    """The free axes of an attention's query rows: axes of a softmax's probabilities that the
    other factor of a contraction reading them lacks (GQA's `r q` beside `V[b g x d]`).
    packing.py packs those into the fragment rows where it pays (and under a causal mask over
    q, and in a split decode), so they are not merged here: one mechanism per idea."""
    out: set[str] = set()
    for s in g:
        if not isinstance(ir.op(g, s), ir.Softmax):
            continue
        seen, todo = {s}, [s]
        while todo:                     # the probabilities, through elementwise operations
            n = todo.pop()
            for m in g.successors(n):
                if m in seen:
                    continue
                seen.add(m)
                if isinstance(ir.op(g, m), ir.Contract):
                    others = [u for u in ir.operands(g, m) if u not in seen]
                    for u in others:
                        out |= set(ir.type_of(g, s).axes) - set(ir.type_of(g, u).axes)
                elif isinstance(ir.op(g, m), (ir.Map, ir.Assign)):
                    todo.append(m)
    return out


def _excluded(g: DiGraph, keep) -> set[str]:
    """Axes that keep their own identity: read as values, renamed, scanned, or hinted."""
    out = set(keep) | {h.axis for h in g.graph.get("hints", ())}
    for n in g:
        op = ir.op(g, n)
        if isinstance(op, (ir.Index, ir.SizeOf)):
            out.add(op.axis)
        elif isinstance(op, (ir.View, ir.Gather)):
            out |= set(ir.type_of(g, n).axes)
            for u in ir.operands(g, n):
                out |= set(ir.type_of(g, u).axes)
        elif isinstance(op, ir.Scan) or (isinstance(op, ir.Reduce) and
                                         op.fn in ir.INDEX_REDUCTIONS):
            out |= set(op.axes)
    return out


def chains(g: DiGraph, keep=(), free: bool = True) -> list[tuple[str, ...]]:
    """The chains of two or more axes that merge (see the module docstring), in first-seen
    order; `free=False`: only those an op names (contracted, reduced, normalised)."""
    excluded = _excluded(g, keep)
    where: dict[str, set] = {}          # axis -> nodes whose type has it
    seen: dict[str, None] = {}
    for n in ir.order(g):
        for a in ir.type_of(g, n).axes:
            where.setdefault(a, set()).add(n)
            seen.setdefault(a)
    naming = {a: frozenset(n for n in g if isinstance(ir.op(g, n), _NAMING)
                           and a in ir.op(g, n).axes) for a in seen}
    after: dict[str, str] = {}
    for a in seen:
        if a in excluded:
            continue
        nxt = set()
        for n in where[a]:
            axes = ir.type_of(g, n).axes
            i = axes.index(a)
            nxt.add(axes[i + 1] if i + 1 < len(axes) else None)
        if len(nxt) != 1:
            continue
        (b,) = nxt
        if b is None or b in excluded or where[b] != where[a] or naming[b] != naming[a]:
            continue
        after[a] = b
    rows = _attention_rows(g) if free else set()
    after = {a: b for a, b in after.items()
             if naming[a] or (free and a not in rows and b not in rows)}
    first = set(after) - set(after.values())
    out = []
    for a in seen:
        if a in first:
            chain = [a]
            while chain[-1] in after:
                chain.append(after[chain[-1]])
            out.append(tuple(chain))
    return out


def _sub(axes: tuple[str, ...], merged: dict[str, tuple[str, str]]) -> tuple[str, ...]:
    """axes with each chain replaced by its merged axis (at the chain's first axis)."""
    out = []
    for a in axes:
        out.append(merged[a][0] if a in merged else a)
    return tuple(dict.fromkeys(out))


def merge_axes(g: DiGraph, keep=(), free: bool = True) -> DiGraph:
    """The IR with every chain of axes that always travel together merged into one axis
    (`free=False`: only chains an op names)."""
    found = chains(g, keep, free)
    if not found:
        return g
    g = g.copy()
    merged = {a: (name(c), c[0]) for c in found for a in c}
    axes = dict(g.graph["axes"])
    for c in found:
        parts = [axes[a].size for a in c]
        size = math.prod(parts) if all(s is not None for s in parts) else None
        axes[name(c)] = ir.Axis(name(c), size, name(c), None, merged=c)
    g.graph["axes"] = axes
    for n in g:
        node = g.nodes[n]
        t = node["type"]
        node["type"] = ir.ArrayType(_sub(t.axes, merged), t.dtype)
        op = node["op"]
        if isinstance(op, (ir.Contract, ir.Reduce, ir.Softmax)):
            node["op"] = replace(op, axes=_sub(op.axes, merged))
    for u, v in list(g.edges):
        g.edges[u, v]["array"] = ir.type_of(g, u)
    g.graph["equations"] = tuple(
        replace(e, **{f: _sub(getattr(e, f), merged)
                      for f in ("axes", "contracted", "reduced", "normalised", "broadcast")})
        for e in g.graph.get("equations", ()))
    g.graph["merged"] = tuple(g.graph.get("merged", ())) + tuple((name(c), c) for c in found)
    return g


def has_free(g: DiGraph) -> bool:
    """Whether a merged axis of g is free (no op names it) and a row or column of a product
    (in its result and in one operand only: `X[b t k] * W[k m]`'s (b*t), the rows a tile
    spans): `plan.fuse_kernels` prices those. A merged batch axis of a product (in both
    operands: attention's (b*h)) or of elementwise work changes the tiles by a few tenths of
    a percent at most (never past MARGIN), and pricing it fused the diagram twice."""
    named = {a for n in g if isinstance(ir.op(g, n), _NAMING) for a in ir.op(g, n).axes}
    free = {m for m, _ in g.graph.get("merged", ()) if m not in named}
    for n in g:
        if free and isinstance(ir.op(g, n), ir.Contract):
            operands = [set(ir.type_of(g, u).axes) for u in ir.operands(g, n)]
            for m in free & set(ir.type_of(g, n).axes):
                if sum(m in axes for axes in operands) == 1:
                    return True
    return False


def sizes_of(g: DiGraph, sizes: dict) -> dict:
    """`sizes` with each merged axis's size, the product of its parts'."""
    out = dict(sizes)
    for name_, info in g.graph["axes"].items():
        if info.merged is not None and all(a in out for a in info.merged):
            out[name_] = math.prod(int(out[a]) for a in info.merged)
    return out


def shaped(g: DiGraph, array, axes: tuple[str, ...], sizes: dict):
    """A row-major array of the diagram's shape as the merged axes of `axes` lay it out."""
    return array.reshape(tuple(int(sizes[a]) for a in axes))


def diagram_sizes(g: DiGraph, sizes: dict) -> dict:
    """`sizes` without the merged axes' (explain: the diagram's axes)."""
    axes = g.graph["axes"]
    return {a: int(v) for a, v in sizes.items() if a not in axes or axes[a].merged is None}


def report(g: DiGraph, sizes: dict) -> list[dict]:
    """The merges of g for explain's report: each axis, its parts and its size."""
    return [{"axis": a, "parts": list(parts), "size": int(sizes[a])}
            for a, parts in g.graph.get("merged", ())]


def describe(merged) -> list[str]:
    """explain's lines for `report`'s entries."""
    return [f"axes {' '.join(m['parts'])} merged into one {m['axis']} = {m['size']}: "
            "adjacent in every array" for m in merged]


def priced(problem, fused, engine: str, total):
    """The problem fusion plans: free axes merged where predicted faster (the problem's own
    IR), then axes merged for one product (local_merge.py), each against the IR without them
    (`Problem.unmerged`, `fused(problem)` its fusion); by less than MARGIN the user's axes
    stay (explain, hints, choices name them); with the engine "tensor-cores" a product merged
    for itself is kept (without, its kernel is N0606). `total`: a fusion's predicted time
    (splitting.total)."""
    while problem.unmerged is not None:
        if engine == "tensor-cores" and problem.graph.graph.get("local_merged") and \
                not problem.unmerged.graph.graph.get("local_merged"):
            break
        if total(fused(problem)) < total(fused(problem.unmerged)) * (1 - MARGIN):
            break
        problem = problem.unmerged
    return problem
