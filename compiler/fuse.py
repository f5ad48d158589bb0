"""Fusion: which equations run as one kernel, and why each boundary is where it is.

Every equation starts as its own kernel. Greedily, the pair of kernels whose
fusion saves the most predicted time is merged (a producer and its consumer,
or two kernels reading the same array), as long as merging keeps the kernel
graph acyclic, until no merge helps. Any set of equations can form
a legal kernel (a reduction that cannot stream in one pass takes another pass
over its axis, recomputing what it needs): the fusion theorem shows up as the
price of those passes, of recomputation, or of a footprint that does not fit,
and that price is what decides, and what `explain` reports for each boundary.

Then recomputation across kernels: a kernel that loads an intermediate another kernel
stores may compute it again instead, from what that producer loads (the upstream closure
of the intermediate's statements within the producer), or from the inputs through every
kernel (loading only intermediates smaller than it). Such a duplication is kept when the
predicted total time of the kernels is lower (the producer no longer storing the
intermediate when nobody else loads it, dropping what it then computes for nothing, or
disappearing when it stores nothing), until none helps; once kernels overlap, merging two
is tried again too (the kernel that lay between them may be gone). FlashAttention's
backward is the example: its dK, dV kernel recomputes S, P, dP and dS rather than reading
what the dQ kernel computed. Kernels may then overlap; every statement has one owner, the
kernel that stores its arrays when an output or another kernel not computing them needs
them. Each step prices by the planner's quick estimate; where it calls a merge, a duplication
or the choice among the starts' layouts close, the full tile search decides (confirm.py).
"""

from __future__ import annotations

import functools
from dataclasses import replace

from .graph import DiGraph, is_dag

from . import boundaries, ir, row_state, sums
from .kernels import FusedKernel, Reason, check_stores, fused_kernel

from .clusters import (Cluster, _creates_cycle, _edges, _splits_apart, _statements, _topological,
                       cluster_dag)
from .confirm import Confirm
from .recompute import _Layouts, _time


def unfused_kernels(g: DiGraph) -> list[FusedKernel]:
    """One kernel per equation (the plan without fusion)."""
    stmts = _statements(g)
    ks = [fused_kernel(g, "", nodes) for _, nodes in sorted(stmts.items())]
    return _named(g, ks)


def _named(g: DiGraph, ks: list[FusedKernel]) -> list[FusedKernel]:
    out = [replace(k, name=f"k{i}") for i, k in enumerate(_topological(g, ks))]
    check_stores(g, out)
    return out


def fuse(g: DiGraph, planner) -> list[FusedKernel]:
    stmts = _statements(g)

    @functools.cache     # (each cluster's kernel is asked for again at every merge step)
    def kernel(c: Cluster) -> FusedKernel:
        return fused_kernel(g, "k?", set().union(*(stmts[s] for s in c)))

    def time(c: Cluster) -> float:
        return _time(planner, kernel(c))
    confirm = Confirm(planner, kernel)      # (a close merge priced again: confirm.py)
    slower = confirm.slower

    starts = [{frozenset([s]) for s in stmts}]
    seeded = _partial_side(g, stmts)
    if seeded is not None:
        # a split's partial side (scores, probabilities and partial states) is often only
        # worth fusing whole: pairwise steps through it may each lose, so greedy fusion also
        # starts from it merged, and the cheaper result is kept
        starts.append({seeded} | {frozenset([s]) for s in stmts if s not in seeded})
    whole = _as_written(g, stmts)
    if whole is not None:
        # the statements nested.py cut from one the user wrote start merged as well: greedy
        # fusion is myopic, and a pairwise step apart from the outer statement may lose where
        # it only pays whole (FlashAttention's `softmax[x](S) * V`); the cheaper result is kept
        starts.append(whole)
    sites = _attention_sites(g, stmts, whole)
    if sites is not None:
        # each attention whole (its scores, their logsumexps, the softmax and the product of
        # the probabilities): a pairwise step may fuse the scores with their operands'
        # projection first (on the CUDA cores), after which no kernel is FlashAttention
        starts.append(sites)
    summed = _joined(g, stmts, set(starts[-1]), sums.statements(g, stmts))
    if summed is not None:
        # each sum of products with the statements computing them (sums.py): a pairwise step
        # through one product and the sum may lose where the sum in one kernel pays
        starts.append(summed)
    results = [_greedy(g, stmts, set(start), time, slower=slower) for start in starts]
    apart = _statistics(g, stmts, planner.sizes)
    if apart:
        # a row statistic (a reduction to far fewer values: a logsumexp, D = sum(dO * O)) that
        # greedy fusion merges into its N x N consumer saves a few bytes and can block the
        # recomputation that pays most (the backward of attention from its inputs: without
        # the statistics in kernels of their own, no consumer recomputes the probabilities);
        # so greedy fusion also runs keeping each statistic apart from its consumers, and the
        # start whose recomputed layout is fastest is kept
        def keep_apart(p, c) -> bool:
            return any(v in c for s in p for v in apart.get(s, ()))
        # (a first start whose kernels already keep them apart is what the second would give)
        if any(keep_apart(frozenset([s]), c) for c in results[0] for s in c):
            results.append(_greedy(g, stmts, {frozenset([s]) for s in stmts}, time, keep_apart,
                                   slower))
            if whole is not None:
                results.append(_greedy(g, stmts, set(whole), time, keep_apart, slower))
    lay = _Layouts(g, stmts, kernel, planner, confirm.worse)
    layouts = []
    for clusters in dict.fromkeys(frozenset(cs) for cs in results):
        start = tuple(sorted(((c, frozenset()) for c in clusters), key=lambda e: sorted(e[0])))
        layouts.append(lay.settled(lay.recompute(start)))
    # the quickest, or of those within confirm.CLOSE of it the fastest by the full search
    layout = confirm.fastest(layouts, lay.time, lay.kernels) if len(layouts) > 1 else layouts[0]
    ks = [replace(k, why=Reason(functools.partial(boundaries.why, lay, layout, i, confirm.refused)))
          for i, k in enumerate(lay.kernels(layout))]      # (made when explain reads them)
    return _named(g, ks)


def regroup(g: DiGraph, groups) -> list[FusedKernel] | None:
    """Kernels of these statement groups (another fusion's, on a graph with the same
    statements), named in launch order; no boundary reasons (for pricing only). A group is
    (a kernel's statements, those of them it recomputes: `FusedKernel.recomputed`). None
    where the groups cannot launch in any order on this graph (a split of another count
    rewrote it otherwise: the caller fuses it afresh)."""
    stmts = _statements(g)
    layout = tuple((frozenset(s for s in eqs if s in stmts),
                    frozenset(s for s in copies if s in stmts)) for eqs, copies in groups)

    @functools.cache
    def kernel(c: Cluster) -> FusedKernel:
        return fused_kernel(g, "k?", set().union(*(stmts[s] for s in c)))
    lay = _Layouts(g, stmts, kernel, None)
    return _named(g, lay.kernels(layout)) if lay.valid(layout) else None


def _partial_side(g, stmts) -> Cluster | None:
    """The statements computing over a split's share axis, when they form a legal kernel."""
    info = g.graph.get("split")       # (the latest: the side a split just made)
    if info is None:
        return None
    side = frozenset(s for s, nodes in stmts.items()
                     if any(info.share_axis in ir.type_of(g, n).axes for n in nodes))
    if len(side) < 2:
        return None
    rest = {frozenset([s]) for s in stmts if s not in side}
    return side if _acyclic(g, stmts, rest | {side}) else None


def _acyclic(g, stmts, clusters) -> bool:
    """Whether kernels of these clusters of statements read each other without a cycle (a
    legal start for greedy fusion)."""
    owner = {n: cl for cl in clusters for s in cl for n in stmts[s]}
    dag = DiGraph()
    for n, cl in owner.items():
        dag.add_node(cl)
        for v in g.successors(n):
            if owner.get(v, cl) != cl:
                dag.add_edge(cl, owner[v])
    return is_dag(dag)


def _as_written(g, stmts) -> set | None:
    """The statements as the user wrote them: each with those nested.py cut from it (None:
    nothing was cut, or merging them would not be a legal start)."""
    within = dict(g.graph.get("nested", ()))
    if not any(s in stmts for s in within):
        return None
    groups: dict[int, set] = {}
    for s in stmts:
        groups.setdefault(within.get(s, s), set()).add(s)
    clusters = {frozenset(c) for c in groups.values()}
    if any(_splits_apart(g, c) for c in clusters):    # (a product read through reshapes)
        return None
    return clusters if _acyclic(g, stmts, clusters) else None


def _attention_sites(g, stmts, whole) -> set | None:
    """The statements as written (or one each) with each softmax whose probabilities a product
    reads merged with that product, the statement of the scores it normalises (a product's)
    and those of row statistics of those scores or of its probabilities that are the
    softmax's final state (row_state.py: a logsumexp, a maximum, a sum of exponentials, a sum
    or maximum of P) (None: no such site to add,
    or not a legal start)."""
    clusters = set(whole) if whole is not None else {frozenset([s]) for s in stmts}
    owner = {n: s for s, nodes in stmts.items() for n in nodes}
    sites = []
    for s, nodes in stmts.items():
        for n in nodes:
            if not isinstance(ir.op(g, n), ir.Softmax):
                continue
            readers = {owner[v] for v in ir.readers(g, n) if v in owner and
                       isinstance(ir.op(g, v), ir.Contract)}
            scores = owner.get(ir.operands(g, n)[0])
            if not readers or scores is None or scores == s or not any(
                    isinstance(ir.op(g, m), ir.Contract) for m in stmts[scores]):
                continue
            arg, axes = ir.operands(g, n)[0], ir.op(g, n).axes
            lses = {t for t, ns in stmts.items() if t != s and any(
                row_state.statistic(g, m, arg, axes, n) for m in ns)}
            sites.append({s, scores} | readers | lses)
    return _joined(g, stmts, clusters, sites)


def _joined(g, stmts, clusters: set, sites) -> set | None:
    """The clusters with each site's statements (and the clusters holding them) merged, or
    None where none grew or the result is no legal start."""
    grew = False
    for site in sites:
        joined = frozenset().union(*(c for c in clusters if c & site))
        grew |= not any(c == joined for c in clusters)
        clusters = {c for c in clusters if not c & site} | {joined}
    if not grew or any(_splits_apart(g, c) for c in clusters):
        return None
    return clusters if _acyclic(g, stmts, clusters) else None


def _statistics(g, stmts, sizes) -> dict[int, set[int]]:
    """Statements computing a reduction to at most 1/16 of the values it reads, with the
    statements that read it: {statistic statement: its consumers' statements}."""
    def count(n):
        out = 1
        for a in ir.type_of(g, n).axes:
            out *= sizes.get(a, 1)
        return out
    out: dict[int, set[int]] = {}
    for s, nodes in stmts.items():
        for n in nodes:
            if not isinstance(ir.op(g, n), (ir.Reduce, ir.Contract, ir.Softmax)) or \
                    not getattr(ir.op(g, n), "axes", ()):
                continue
            if 16 * count(n) > max(count(a) for a in ir.operands(g, n)):
                continue
            readers = {g.nodes[v]["stmt"] for u in nodes for v in g.successors(u)} & \
                set(stmts) - {s}
            if readers:
                out[s] = readers
            break
    return out


def _greedy(g, stmts, clusters: set, time, keep_apart=None, slower=None) -> set:
    """Merge the pair of clusters whose fusion saves the most predicted time, until none does
    (`keep_apart(p, c)`: a pair never to merge; `slower(p, c, gain, apart)`: whether the full
    search prices a close merge slower, which is then not made: confirm.py)."""
    while True:
        gains = []
        dag = cluster_dag(g, stmts, clusters)       # (one for every pair tried this round)
        for p, c in sorted(_edges(g, stmts, clusters, siblings=True),
                           key=lambda e: (sorted(e[0]), sorted(e[1]))):
            if _creates_cycle(g, stmts, clusters, p, c, dag=dag) or \
                    _creates_cycle(g, stmts, clusters, c, p, dag=dag):
                continue
            if keep_apart is not None and (keep_apart(p, c) or keep_apart(c, p)):
                continue
            merged = p | c
            if _splits_apart(g, merged):
                continue
            apart, together = time(p) + time(c), time(merged)
            if together == float("inf"):
                continue
            gain = apart - together       # infinite when a side has no tiling of its own
            floor = 0.0 if apart == float("inf") else 1e-12 * max(apart, 1e-30)
            if gain > floor:
                gains.append((gain, apart, p, c))
        # the largest gain first (the first found among equal ones) that is not slower
        best = next(((p, c) for gain, apart, p, c in sorted(gains, key=lambda e: -e[0])
                     if slower is None or not slower(p, c, gain, apart)), None)
        if best is None:
            break
        p, c = best
        clusters -= {p, c}
        clusters.add(p | c)
    return clusters
