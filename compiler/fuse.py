"""Fusion: which equations run as one kernel, and why each boundary is where it is.

Every equation starts as its own kernel. Greedily, the pair of kernels whose
fusion saves the most predicted time is merged (a producer and its consumer,
or two kernels reading the same array), as long as merging keeps the kernel
graph acyclic, until no merge helps. Any set of equations can form
a legal kernel (a reduction that cannot stream in one pass takes another pass
over its axis, recomputing what it needs): the fusion theorem shows up as the
price of those passes, of recomputation, or of a footprint that does not fit,
and that price is what decides, and what `explain` reports for each boundary.
"""

from __future__ import annotations

import functools

import networkx as nx

from . import ir
from .kernels import FusedKernel, fused_kernel
from .model import array_name

Cluster = frozenset  # of statement indices


def _statements(g: nx.DiGraph) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for n, data in g.nodes(data=True):
        if data["stmt"] is not None and not isinstance(data["op"], (ir.Input, ir.Output)):
            out.setdefault(data["stmt"], set()).add(n)
    return out


def unfused_kernels(g: nx.DiGraph) -> list[FusedKernel]:
    """One kernel per equation (the plan without fusion)."""
    stmts = _statements(g)
    ks = [fused_kernel(g, "", nodes) for _, nodes in sorted(stmts.items())]
    return _named(g, ks)


def _named(g: nx.DiGraph, ks: list[FusedKernel]) -> list[FusedKernel]:
    order = _topological(g, ks)
    return [FusedKernel(f"k{i}", k.nodes, k.loads, k.stores, k.equations, k.reason)
            for i, k in enumerate(order)]


def _topological(g: nx.DiGraph, ks: list[FusedKernel]) -> list[FusedKernel]:
    owner = {n: i for i, k in enumerate(ks) for n in k.nodes}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(ks)))
    for i, k in enumerate(ks):
        for u in k.loads:
            if u in owner and owner[u] != i:
                dag.add_edge(owner[u], i)
    return [ks[i] for i in nx.lexicographical_topological_sort(dag, key=lambda i: ks[i].equations)]


def fuse(g: nx.DiGraph, planner) -> list[FusedKernel]:
    stmts = _statements(g)

    @functools.cache     # (each cluster's kernel is asked for again at every merge step)
    def kernel(c: Cluster) -> FusedKernel:
        return fused_kernel(g, "k?", set().union(*(stmts[s] for s in c)))

    def time(c: Cluster) -> float:
        p = planner.estimate(kernel(c))
        return float("inf") if p is None else p.cost.time

    starts = [{frozenset([s]) for s in stmts}]
    seeded = _partial_side(g, stmts)
    if seeded is not None:
        # a split's partial side (scores, probabilities and partial states) is often only
        # worth fusing whole: pairwise steps through it may each lose, so greedy fusion also
        # starts from it merged, and the cheaper result is kept
        starts.append({seeded} | {frozenset([s]) for s in stmts if s not in seeded})
    results = [_greedy(g, stmts, set(start), time) for start in starts]
    clusters = min(results, key=lambda cs: sum(time(c) for c in cs))
    ks = []
    for c in clusters:
        k = kernel(c)
        ks.append(FusedKernel(k.name, k.nodes, k.loads, k.stores, k.equations,
                         _reasons(g, stmts, clusters, c, time, planner)))
    return _named(g, ks)


def regroup(g: nx.DiGraph, groups) -> list[FusedKernel]:
    """Kernels of these statement groups (another fusion's, on a graph with the same
    statements), named in launch order; no boundary reasons (for pricing only)."""
    stmts = _statements(g)
    return _named(g, [fused_kernel(g, "k?", set().union(*(stmts[s] for s in grp if s in stmts)))
                      for grp in groups])


def _partial_side(g, stmts) -> Cluster | None:
    """The statements computing over a split's share axis, when they form a legal kernel."""
    info = g.graph.get("split")
    if info is None:
        return None
    side = frozenset(s for s, nodes in stmts.items()
                     if any(info.share_axis in ir.type_of(g, n).axes for n in nodes))
    if len(side) < 2:
        return None
    rest = {frozenset([s]) for s in stmts if s not in side}
    owner = {n: cl for cl in rest | {side} for s in cl for n in stmts[s]}
    dag = nx.DiGraph()
    for n, cl in owner.items():
        dag.add_node(cl)
        for v in g.successors(n):
            if owner.get(v, cl) != cl:
                dag.add_edge(cl, owner[v])
    return side if nx.is_directed_acyclic_graph(dag) else None


def _greedy(g, stmts, clusters: set, time) -> set:
    """Merge the pair of clusters whose fusion saves the most predicted time, until none does."""
    while True:
        best = None
        for p, c in sorted(_edges(g, stmts, clusters, siblings=True),
                           key=lambda e: (sorted(e[0]), sorted(e[1]))):
            if _creates_cycle(g, stmts, clusters, p, c) or _creates_cycle(g, stmts, clusters, c, p):
                continue
            merged = p | c
            if _splits_apart(g, merged):
                continue
            apart, together = time(p) + time(c), time(merged)
            if together == float("inf"):
                continue
            gain = apart - together       # infinite when a side has no tiling of its own
            floor = 0.0 if apart == float("inf") else 1e-12 * max(apart, 1e-30)
            if gain > floor and (best is None or gain > best[0]):
                best = (gain, p, c)
        if best is None:
            break
        _, p, c = best
        clusters -= {p, c}
        clusters.add(p | c)
    return clusters


def _edges(g, stmts, clusters, siblings: bool = False):
    """Producer -> consumer pairs of clusters; with `siblings`, also pairs reading one array."""
    owner = {n: c for c in clusters for s in c for n in stmts[s]}
    seen = set()
    readers: dict[int, list] = {}
    for c in clusters:
        for s in c:
            for n in stmts[s]:
                for u in g.predecessors(n):
                    p = owner.get(u)
                    if p is not None and p != c and (p, c) not in seen:
                        seen.add((p, c))
                        yield p, c
                    if p is None or p != c:
                        readers.setdefault(u, [])
                        if c not in readers[u]:
                            readers[u].append(c)
    if siblings:
        for cs in readers.values():
            for i, a in enumerate(cs):
                for b in cs[i + 1:]:
                    pair = (a, b) if sorted(a) < sorted(b) else (b, a)
                    if pair not in seen and (pair[1], pair[0]) not in seen:
                        seen.add(pair)
                        yield pair


def _splits_apart(g, cluster: Cluster) -> bool:
    """A split's partial states and their merge stay in two kernels (split.py): fused, the
    merge would reduce the splits inside each block, which is the unsplit plan again."""
    info = g.graph.get("split")
    return info is not None and any(a in cluster and b in cluster for a, b in info.apart)


def _creates_cycle(g, stmts, clusters, p: Cluster, c: Cluster) -> bool:
    """Merging p and c is illegal if another kernel lies on a path between them."""
    owner = {n: cl for cl in clusters for s in cl for n in stmts[s]}
    dag = nx.DiGraph()
    for cl in clusters:
        dag.add_node(cl)
    for n, cl in owner.items():
        for v in g.successors(n):
            other = owner.get(v)
            if other is not None and other != cl:
                dag.add_edge(cl, other)
    for path_start in dag.successors(p):
        if path_start != c and nx.has_path(dag, path_start, c):
            return True
    return False


def _reasons(g, stmts, clusters, c: Cluster, time, planner) -> str:
    """Why this kernel does not also take in its neighbours."""
    parts = []
    for p, q in _edges(g, stmts, clusters):
        if q != c:
            continue
        stored = sorted({array_name(g, n) for n in fused_kernel(
            g, "", set().union(*(stmts[s] for s in p))).stores})
        names = " and ".join([", ".join(stored[:-1]), stored[-1]] if len(stored) > 1 else stored)
        verb = "go" if len(stored) > 1 else "goes"
        merged = p | c
        t_sep, t_fused = time(p) + time(c), time(merged)
        if _creates_cycle(g, stmts, clusters, p, c):
            why = "another kernel lies between them"
        elif _splits_apart(g, p | c):
            why = "the merge of split partial states is its own kernel"
        elif t_fused == float("inf"):
            why = "no tiling of the fused kernel fits in memory"
        else:
            fmt = _fmt if planner.target.processors else _units
            why = f"fused it would take {fmt(t_fused)} instead of {fmt(t_sep)}" + \
                _factor(planner, g, stmts, p, c)
        parts.append(f"{names} {verb} through global memory: {why}")
    return "; ".join(parts)


def _factor(planner, g, stmts, p, c) -> str:
    def quick(stmt_set):
        return planner.estimate(fused_kernel(g, "", set().union(*(stmts[s] for s in stmt_set))))
    merged, a, b = quick(p | c), quick(p), quick(c)
    if merged is None or a is None or b is None:
        return ""
    flops = sum(merged.cost.flops.values())
    separate = sum(a.cost.flops.values()) + sum(b.cost.flops.values())
    if flops > 1.01 * separate:
        return f" (it recomputes work: {flops / separate:.1f}x the arithmetic)"
    if merged.model.streaming.passes > 1:
        return f" (it needs {merged.model.streaming.passes} passes over {merged.model.streaming.axis})"
    if merged.cost.utilization < 0.5 * min(a.cost.utilization, b.cost.utilization):
        return f" (too few blocks to fill the GPU: {merged.cost.utilization:.0%} busy)"
    return ""


def _units(t: float) -> str:
    """A model without a clock (the paper's two-level target) predicts in its own units."""
    return f"{t:.3g} model time units"


def _fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"
