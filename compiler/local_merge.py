"""Axes merged for one product: a contraction over `h d` adjacent in both operands, read as one
axis `(h*d)` by that product alone (a reshape view of its operands; the rest of the diagram
keeps h and d).

merge.py merges axes that travel together in the WHOLE diagram. In a transformer block `h d`
are adjacent in the attention output `A[b t h d]` and in `Wo[h d m]` but not in `Q[b h t d]`,
so `R = X + A * Wo` keeps a contraction over two axes: on the CUDA cores (a kernel streams one
and holds the other), 2.43 ms of the block's 3.44 ms (b=2, t=m=2048, h=16, d=128 on h100,
model). Read as `A[b t (h*d)] * Wo[(h*d) m]` it is one matrix product with k = h*d, which the
tensor-core product site (tensorcore.py) takes as it is.

Chosen over a two-axis nesting on the tensor cores (the k-loop over h outer, d inner): a
row-major array whose axes `h d` are adjacent IS the array with `(h*d)` in memory, so the
merged operand is a tile copy like any other (no new loop, no new cost formula, the existing
product search and lowering), and its chunks run the whole k = h*d (a nesting re-enters the
pipeline every d: 6% slower than CUDA cores at t=m=4096 h=4 d=16 in an earlier prototype).

A chain is any run of two or more such axes (`(g*h*d)` for `A[b t g h d] * W[g h d m]`):
plan.py merges before canonical.py nests a contraction over three axes (which would leave
one contracted axis), and nests what is left after (`canonical.nested_contractions`). A run of
the product's result axes that one operand holds adjacent (in the result's order) and the
other lacks merges too (`kept_chains`: `dA[b t h d] = dR[b t m] * Wo[h d m]` as `(b*t)` rows
and `(h*d)` columns), where the result is only a statement's output: the product, its
assignment and the outputs are retyped (the same row-major memory, as merge.py's outputs).

`merge_products` (a pure function, after nested.py) rewrites each contraction whose contracted
axes hold such a chain: each operand is read through an `ir.Reshape` node (in the product's
statement) whose type names the merged axis, and the contraction sums over it. Where:
- the chain's axes are contracted, adjacent and in the same order in both operands;
- each operand is an input or another statement's array (stored in global memory, where the
  reshape is free), also read through a view that only renames its axes (`dV[b t h d]` of
  `dV[b s h d]`, where rename.py computes the statement under its reader's `t`): the reshape
  reads the array under its own names, the view renames the reshape. A renamed axis merges
  where the chain's positions in the array are consecutive and in order (`_own`: positions,
  not names; a view relabels positions): a weight gradient's `dWk[m h d] = dK[b s h d] *
  X[b s m]` of `X[b t m]` (rename._read_through) reads `X[(b*t) m]` renamed `[(b*s) m]`;
  a value the product's own statement computes is left alone;
- none of the chain's axes is hinted (`group`/`stream`/`split`, `keep`).
The producer's statement and the product's stay in two kernels (`g.graph["apart"]`, read by
fusion and recomputation: clusters.py): fused, the reshape would read a value the kernel
computes at other positions than its own. The merged axis is an `Axis` with `merged` set (its
size the product, merge.sizes_of), named as merge.py names it; `g.graph["local_merged"]` lists
(contraction, axis, chain) for explain. Whether the rewritten IR is used is priced: prepare
plans the diagram with and without (plan.fuse_kernels, merge.MARGIN)."""

from __future__ import annotations

import math
from dataclasses import replace

from .graph import DiGraph

from . import ir
from .merge import _attention_rows, _sub, chains, name


def chains_of(g: DiGraph, c: int, keep=()) -> list[tuple[str, ...]]:
    """The chains of contraction c's contracted axes that its operands both hold adjacent and
    in one order (none where an operand is computed in c's statement or the two are one)."""
    op = ir.op(g, c)
    if not isinstance(op, ir.Contract) or len(op.axes) < 2 or not _both_stored(g, c):
        return []
    x, y = (ir.type_of(g, u).axes for u in ir.operands(g, c))
    return [ch for ch in _runs(x, y, set(op.axes) - _excluded(g, keep))
            if all(_own(g, u, c, ch) is not None for u in ir.operands(g, c))]


def kept_chains(g: DiGraph, c: int, keep=()) -> list[tuple[str, ...]]:
    """The chains of contraction c's result axes that one operand holds adjacent and in the
    result's order and the other lacks (`dA[b t h d] = dR[b t m] * Wo[h d m]`: h d, and b t),
    where the result is only a statement's output (its array, merged, is the diagram's own
    in memory; an array another statement reads keeps its axes). An attention's query rows
    (GQA's `r q` of `O = P * V`) are packing.py's, as in merge.py."""
    if not isinstance(ir.op(g, c), ir.Contract) or not _both_stored(g, c) or \
            not _output_only(g, c):
        return []
    out = ir.type_of(g, c).axes
    (named,) = g.successors(c)      # its layout may be another order: adjacent there too
    x, y = (ir.type_of(g, u).axes for u in ir.operands(g, c))
    excluded = _excluded(g, keep) | _attention_rows(g)
    return [ch for u, z, w in zip(ir.operands(g, c), (x, y), (y, x))
            for ch in _runs(out, z, {a for a in z if a not in w} - excluded)
            if _runs(ch, ir.type_of(g, named).axes, set(ch)) == [ch] and
            _own(g, u, c, ch) is not None]


def _runs(x, y, allowed: set) -> list[tuple[str, ...]]:
    """The runs of two or more `allowed` axes adjacent in x and in y, in one order."""
    after = {}
    for a, b in zip(x, x[1:]):
        if {a, b} <= allowed and a in y and b in y and y.index(b) == y.index(a) + 1:
            after[a] = b
    out = []
    for a in x:
        if a in after and a not in after.values():
            chain = [a]
            while chain[-1] in after:
                chain.append(after[chain[-1]])
            out.append(tuple(chain))
    return out


def _excluded(g: DiGraph, keep) -> set[str]:
    return set(keep) | {h.axis for h in g.graph.get("hints", ())}


def _both_stored(g: DiGraph, c: int) -> bool:
    args = ir.operands(g, c)
    return len(args) == 2 and args[0] != args[1] and all(_stored(g, u, c) for u in args)


def _output_only(g: DiGraph, c: int) -> bool:
    """Whether c's value is named by one assignment (in any layout) that only outputs read."""
    (s, *rest) = list(g.successors(c)) or [None]
    return s is not None and not rest and isinstance(ir.op(g, s), ir.Assign) and \
        set(ir.type_of(g, s).axes) == set(ir.type_of(g, c).axes) and g.out_degree(s) > 0 and \
        all(isinstance(ir.op(g, o), ir.Output) for o in g.successors(s))


def _stored(g: DiGraph, u: int, c: int) -> bool:
    """Whether operand u of c is read from global memory: an input or another statement's,
    also through a view in c's statement that only renames its axes (`dV[b t h d]` of
    `dV[b s h d]`, where rename.py computes a statement under its reader's names)."""
    u = _viewed(g, u, c)[0]
    return isinstance(ir.op(g, u), ir.Input) or (
        g.nodes[u]["stmt"] is not None and g.nodes[u]["stmt"] != g.nodes[c]["stmt"])


def _viewed(g: DiGraph, u: int, c: int):
    """(the array operand u of c reads through one renaming view in c's statement, that view
    or None)."""
    op = ir.op(g, u)
    if isinstance(op, ir.View) and g.nodes[u]["stmt"] == g.nodes[c]["stmt"] and \
            len(set(op.labels)) == len(op.labels):
        return ir.operands(g, u)[0], u
    return u, None


def _own(g: DiGraph, u: int, c: int, chain: tuple[str, ...]) -> tuple[str, ...] | None:
    """chain (adjacent in operand u's type, c's names) under the names of the array u reads,
    where its positions there are consecutive and in order, so one row-major run of memory
    (a renaming view relabels positions: `X[b s m]` of `X[b t m]` holds `b s` where X holds
    `b t`); None where they are not. Positions decide, not names."""
    base, view = _viewed(g, u, c)
    if view is None:
        return chain
    labels = ir.op(g, view).labels
    at = [labels.index(a) for a in chain]
    if at != list(range(at[0], at[0] + len(chain))):
        return None
    return tuple(ir.type_of(g, base).axes[i] for i in at)


def _axis(axes: dict, chain: tuple[str, ...]) -> None:
    """The merged axis of chain in the axes table (its size the product of its parts')."""
    parts = [axes[a].size for a in chain]
    size = math.prod(parts) if all(s is not None for s in parts) else None
    axes.setdefault(name(chain), ir.Axis(name(chain), size, name(chain), None, merged=chain))


def merge_products(g: DiGraph, keep=()) -> DiGraph:
    """The IR with each contraction's mergeable chains (`chains_of`, `kept_chains`) read
    through reshapes; a kept chain's result, its assignment and outputs retyped (not one
    that merge.py merges in the whole diagram: `X[b t k] * W[k m]`'s (b*t) is its free merge)."""
    whole = [set(ch) for ch in chains(g, keep)]     # free merges merge.py makes and prices
    found = {c: chains_of(g, c, keep) + [ch for ch in kept_chains(g, c, keep)
                                         if not any(set(ch) <= w for w in whole)]
             for c in ir.order(g)}
    found = {c: cs for c, cs in found.items() if cs}
    if not found:
        return g
    g = g.copy()
    axes = dict(g.graph["axes"])
    listed = list(g.graph.get("local_merged", ()))
    eqs = list(g.graph.get("equations", ()))
    for c, cs in found.items():
        merged = {a: (name(ch), ch[0]) for ch in cs for a in ch}
        for ch in cs:
            _axis(axes, ch)
            listed.append((c, name(ch), ch))
        stmt = g.nodes[c]["stmt"]
        for u in dict.fromkeys(ir.operands(g, c)):
            t = ir.type_of(g, u)
            if _sub(t.axes, merged) == t.axes:
                continue
            base, view = _viewed(g, u, c)
            b = ir.type_of(g, base)
            own = {}                    # the chains under the array's own names
            for ch in cs:
                if ch[0] in t.axes:     # (a chain lies whole in an operand, or not at all)
                    mine = _own(g, u, c, ch)
                    _axis(axes, mine)
                    own.update({a: (name(mine), mine[0]) for a in mine})
            r = ir.add_node(g, ir.Reshape(), ir.ArrayType(_sub(b.axes, own), b.dtype), [base],
                            g.nodes[c]["span"], stmt)
            if view is not None:        # the view renames the reshape (of the array itself)
                labels = _sub(ir.op(g, view).labels, merged)
                r = ir.add_node(g, ir.View(labels), ir.ArrayType(_sub(t.axes, merged), t.dtype),
                                [r], g.nodes[c]["span"], stmt)
            ports = g.edges[u, c]["ports"]
            g.remove_edge(u, c)
            g.add_edge(r, c, array=ir.type_of(g, r), ports=ports)
            if view is not None and g.out_degree(view) == 0:
                g.remove_node(view)
        g.nodes[c]["op"] = replace(ir.op(g, c), axes=_sub(ir.op(g, c).axes, merged))
        if _sub(ir.type_of(g, c).axes, merged) != ir.type_of(g, c).axes:
            _retyped(g, c, merged)
            eqs = [replace(e, axes=_sub(e.axes, merged)) if e.stmt == stmt else e for e in eqs]
    g.graph["axes"] = axes
    g.graph["local_merged"] = tuple(listed)
    g.graph["equations"] = tuple(eqs)
    return with_apart(g)


def _retyped(g: DiGraph, c: int, merged) -> None:
    """c, the assignment naming it and the outputs reading that, over the merged axes."""
    (s,) = g.successors(c)
    for n in (c, s, *g.successors(s)):
        t = ir.type_of(g, n)
        g.nodes[n]["type"] = ir.ArrayType(_sub(t.axes, merged), t.dtype)
        for _, v in g.out_edges(n):
            g.edges[n, v]["array"] = g.nodes[n]["type"]


def with_apart(g: DiGraph) -> DiGraph:
    """g with `apart` naming, for each reshape, its operand's statement and its own (g
    changed in place: after merge_products, and again once the statements are cut anew)."""
    g.graph["apart"] = tuple(sorted({
        (g.nodes[u]["stmt"], g.nodes[r]["stmt"]) for r in g
        if isinstance(ir.op(g, r), ir.Reshape) for u in ir.operands(g, r)
        if g.nodes[u]["stmt"] is not None}))
    return g





def parts(g: DiGraph, axis: str) -> tuple[str, ...]:
    """The axes a (merged) axis stands for: itself when it is not merged."""
    info = g.graph["axes"].get(axis)
    return info.merged if info is not None and info.merged is not None else (axis,)


def decomposed(g: DiGraph, n: int) -> list[tuple[str, tuple[str, ...]]]:
    """(axis of reshape n, the base's axes it stands for), in order."""
    return [(a, parts(g, a)) for a in ir.type_of(g, n).axes]


def apart(g: DiGraph, cluster) -> bool:
    """Whether a set of statements holds a reshape's and its operand's producer's (which stay
    in two kernels)."""
    return any(a in cluster and b in cluster for a, b in g.graph.get("apart", ()))


def apart_reason(g: DiGraph, cluster) -> str:
    """explain's reason two kernels stay apart by `apart`: the merged axes the product reads."""
    pairs = {a: ch for c, a, ch in g.graph.get("local_merged", ())
             if g.nodes[c]["stmt"] in cluster}
    said = ", ".join(f"{' '.join(ch)} as one axis {a}" for a, ch in pairs.items())
    return (f"the product here reads {said}, and a product over merged axes reads its "
            "operands as stored")


def report(g: DiGraph, kernel_nodes) -> list[str]:
    """explain's lines for the contractions of a kernel read through reshapes."""
    nodes = set(kernel_nodes)
    return [f"contracts {' '.join(ch)} as one axis {axis} in this kernel (adjacent in both "
            "operands; the rest of the diagram keeps them)" if axis in ir.op(g, c).axes else
            f"keeps {' '.join(ch)} as one axis {axis} in this kernel (adjacent in an operand "
            "and the output; the rest of the diagram keeps them)"
            for c, axis, ch in g.graph.get("local_merged", ()) if c in nodes]

