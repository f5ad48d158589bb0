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

`merge_products` (a pure function, after nested.py) rewrites each contraction whose contracted
axes hold such a chain: each operand is read through an `ir.Reshape` node (in the product's
statement) whose type names the merged axis, and the contraction sums over it. Where:
- the chain's axes are contracted, adjacent and in the same order in both operands;
- each operand is an input or another statement's array (stored in global memory, where the
  reshape is free): a value the product's own statement computes is left alone;
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
from .merge import _sub, name


def chains_of(g: DiGraph, c: int, keep=()) -> list[tuple[str, ...]]:
    """The chains of contraction c's contracted axes that its operands both hold adjacent and
    in one order (none where an operand is computed in c's statement or the two are one)."""
    op = ir.op(g, c)
    if not isinstance(op, ir.Contract) or len(op.axes) < 2:
        return []
    args = ir.operands(g, c)
    if len(args) != 2 or args[0] == args[1] or not all(_stored(g, u, c) for u in args):
        return []
    excluded = set(keep) | {h.axis for h in g.graph.get("hints", ())}
    x, y = (ir.type_of(g, u).axes for u in args)
    contracted = set(op.axes) - excluded
    after = {}
    for a, b in zip(x, x[1:]):
        if {a, b} <= contracted and a in y and b in y and y.index(b) == y.index(a) + 1:
            after[a] = b
    out = []
    for a in x:
        if a in after and a not in after.values():
            chain = [a]
            while chain[-1] in after:
                chain.append(after[chain[-1]])
            out.append(tuple(chain))
    return out


def _stored(g: DiGraph, u: int, c: int) -> bool:
    """Whether operand u of c is read from global memory: an input or another statement's."""
    return isinstance(ir.op(g, u), ir.Input) or (
        g.nodes[u]["stmt"] is not None and g.nodes[u]["stmt"] != g.nodes[c]["stmt"])


def merge_products(g: DiGraph, keep=()) -> DiGraph:
    """The IR with each contraction's mergeable chains (`chains_of`) read through reshapes."""
    found = {c: chains_of(g, c, keep) for c in ir.order(g)}
    found = {c: cs for c, cs in found.items() if cs}
    if not found:
        return g
    g = g.copy()
    axes = dict(g.graph["axes"])
    listed = list(g.graph.get("local_merged", ()))
    for c, cs in found.items():
        merged = {a: (name(ch), ch[0]) for ch in cs for a in ch}
        for ch in cs:
            parts = [axes[a].size for a in ch]
            size = math.prod(parts) if all(s is not None for s in parts) else None
            axes.setdefault(name(ch), ir.Axis(name(ch), size, name(ch), None, merged=ch))
            listed.append((c, name(ch), ch))
        stmt = g.nodes[c]["stmt"]
        for u in dict.fromkeys(ir.operands(g, c)):
            t = ir.type_of(g, u)
            r = ir.add_node(g, ir.Reshape(), ir.ArrayType(_sub(t.axes, merged), t.dtype), [u],
                            g.nodes[c]["span"], stmt)
            ports = g.edges[u, c]["ports"]
            g.remove_edge(u, c)
            g.add_edge(r, c, array=ir.type_of(g, r), ports=ports)
        g.nodes[c]["op"] = replace(ir.op(g, c), axes=_sub(ir.op(g, c).axes, merged))
    g.graph["axes"] = axes
    g.graph["local_merged"] = tuple(listed)
    return with_apart(g)


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


def report(g: DiGraph, kernel_nodes) -> list[str]:
    """explain's lines for the contractions of a kernel read through reshapes."""
    nodes = set(kernel_nodes)
    return [f"contracts {' '.join(ch)} as one axis {axis} in this kernel (adjacent in both "
            "operands; the rest of the diagram keeps them)"
            for c, axis, ch in g.graph.get("local_merged", ()) if c in nodes]
