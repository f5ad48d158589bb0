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
them.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace

import networkx as nx

from . import ir
from .kernels import FusedKernel, check_stores, fused_kernel, is_free
from .model import array_name

Cluster = frozenset  # of statement indices
# A layout: the kernels as (cluster, copies) pairs, `copies` the statements of `cluster` that
# another kernel owns (and stores when needed): computed here again rather than loaded.
Layout = tuple
RELATIVE = 1e-9      # a recomputation is kept when it saves more than this share of the time


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
    out = [replace(k, name=f"k{i}") for i, k in enumerate(_topological(g, ks))]
    check_stores(g, out)
    return out


def _topological(g: nx.DiGraph, ks: list[FusedKernel]) -> list[FusedKernel]:
    """Launch order: a kernel after the kernels that store what it loads (with overlapping
    kernels, the one that stores a node, not every one that computes it)."""
    storer = {n: i for i, k in enumerate(ks) for n in k.stores}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(ks)))
    for i, k in enumerate(ks):
        for u in k.loads:
            if u in storer and storer[u] != i:
                dag.add_edge(storer[u], i)
    return [ks[i] for i in nx.lexicographical_topological_sort(dag, key=lambda i: ks[i].equations)]


def fuse(g: nx.DiGraph, planner) -> list[FusedKernel]:
    stmts = _statements(g)

    @functools.cache     # (each cluster's kernel is asked for again at every merge step)
    def kernel(c: Cluster) -> FusedKernel:
        return fused_kernel(g, "k?", set().union(*(stmts[s] for s in c)))

    def time(c: Cluster) -> float:
        return _time(planner, kernel(c))

    starts = [{frozenset([s]) for s in stmts}]
    seeded = _partial_side(g, stmts)
    if seeded is not None:
        # a split's partial side (scores, probabilities and partial states) is often only
        # worth fusing whole: pairwise steps through it may each lose, so greedy fusion also
        # starts from it merged, and the cheaper result is kept
        starts.append({seeded} | {frozenset([s]) for s in stmts if s not in seeded})
    results = [_greedy(g, stmts, set(start), time) for start in starts]
    clusters = min(results, key=lambda cs: sum(time(c) for c in cs))
    lay = _Layouts(g, stmts, kernel, planner)
    layout = lay.settled(lay.recompute(tuple(sorted(((c, frozenset()) for c in clusters),
                                                    key=lambda e: sorted(e[0])))))
    ks = []
    for i, k in enumerate(lay.kernels(layout)):
        reason = "; ".join(r for r in (_reasons(lay, layout, i),
                                       _recomputes(lay, layout, i)) if r)
        ks.append(replace(k, reason=reason))
    return _named(g, ks)


def regroup(g: nx.DiGraph, groups) -> list[FusedKernel]:
    """Kernels of these statement groups (another fusion's, on a graph with the same
    statements), named in launch order; no boundary reasons (for pricing only). A group is
    (a kernel's statements, those of them it recomputes: `FusedKernel.recomputed`)."""
    stmts = _statements(g)
    layout = tuple((frozenset(s for s in eqs if s in stmts),
                    frozenset(s for s in copies if s in stmts)) for eqs, copies in groups)

    @functools.cache
    def kernel(c: Cluster) -> FusedKernel:
        return fused_kernel(g, "k?", set().union(*(stmts[s] for s in c)))
    return _named(g, _Layouts(g, stmts, kernel, None).kernels(layout))


def _time(planner, k: FusedKernel) -> float:
    p = planner.estimate(k)
    return float("inf") if p is None else p.cost.time


class _Layouts:
    """Kernels that may overlap: their stores by ownership, their times, and the search for
    recomputations that pay (see the module docstring)."""

    def __init__(self, g, stmts, kernel, planner):
        self.g, self.stmts, self.kernel, self.planner = g, stmts, kernel, planner
        self.free: dict = {}
        self.outputs = frozenset(u for o in g.graph["outputs"].values()
                                 for u in g.predecessors(o))
        self._overlapping = functools.cache(self._overlapping_kernel)

    def _overlapping_kernel(self, c: Cluster, copies: Cluster, needed: frozenset) -> FusedKernel:
        nodes = set().union(*(self.stmts[s] for s in c))
        return fused_kernel(self.g, "k?", nodes, needed=needed, recomputed=tuple(copies))

    def owners(self, layout: Layout) -> dict[int, int]:
        """Node -> the kernel owning its statement."""
        return {n: i for i, (c, copies) in enumerate(layout) for s in c - copies
                for n in self.stmts[s]}

    def needed(self, layout: Layout) -> list[frozenset]:
        """Per kernel, what it must store: the nodes it owns that an output is, or that a
        kernel not computing them loads."""
        owner = self.owners(layout)
        need: list[set] = [set() for _ in layout]
        for c, _ in layout:
            for u in self.kernel(c).loads:        # (what a kernel loads is not what it stores)
                if u in owner:
                    need[owner[u]].add(u)
        for u in self.outputs:
            if u in owner:
                need[owner[u]].add(u)
        return [frozenset(x) for x in need]

    def kernels(self, layout: Layout) -> list[FusedKernel]:
        """The layout's kernels; disjoint ones exactly as fusion builds them (each storing what
        a successor outside it reads)."""
        if not any(copies for _, copies in layout):
            return [self.kernel(c) for c, _ in layout]
        needed = self.needed(layout)
        return [self._overlapping(c, copies, needed[i])
                for i, (c, copies) in enumerate(layout)]

    def time(self, layout: Layout, i: int | None = None) -> float:
        """The predicted time of kernel `i` of the layout, or of all of them."""
        ks = self.kernels(layout)
        if i is not None:
            return _time(self.planner, ks[i])
        return sum(_time(self.planner, k) for k in ks)

    def pruned(self, layout: Layout) -> Layout:
        """Without what no longer needs computing: in each kernel, the statements nothing it
        stores depends on (another kernel recomputes what they were stored for), and the
        kernels left with none. A statement a kernel owned passes to the first kernel that
        recomputes it."""
        while True:
            needed = self.needed(layout)
            for i, (c, copies) in enumerate(layout):
                live = self.upstream(c, needed[i])
                if live != c:
                    break
            else:
                return layout
            rest = list(layout)
            rest[i] = (live, copies & live)
            for s in sorted((c - copies) - live):
                for j, (c2, copies2) in enumerate(rest):
                    if s in copies2:
                        rest[j] = (c2, copies2 - {s})
                        break
            layout = tuple(e for e in rest if e[0])

    def upstream(self, producer: Cluster, nodes) -> Cluster:
        """The statements of `producer` that compute `nodes`, and those they need from it
        (stopping at what the producer loads; free expressions are recomputed anyway)."""
        g, stmts = self.g, self.stmts
        inside = {n: s for s in producer for n in stmts[s]}
        todo = sorted({inside[u] for u in nodes})
        out: set = set()
        while todo:
            s = todo.pop()
            if s in out:
                continue
            out.add(s)
            for n in stmts[s]:
                for u in g.predecessors(n):
                    t = inside.get(u)
                    if t is not None and t not in out and not is_free(g, u, self.free):
                        todo.append(t)
        return frozenset(out)

    def elements(self, n: int) -> int:
        count = 1
        for a in ir.type_of(self.g, n).axes:
            count *= self.planner.sizes[a]
        return count

    def deep(self, layout: Layout, c: Cluster, nodes) -> Cluster:
        """The statements computing `nodes` and, through every kernel, those they need, down
        to the inputs, what `c` computes, and the intermediates smaller than the largest of
        `nodes` (loaded: recomputing an array to save loading a smaller one does not pay):
        the scores a kernel recomputes from the inputs rather than from a kernel's
        probabilities, a row statistic loaded."""
        g, stmts = self.g, self.stmts
        where = {n: s for cl, _ in layout for s in cl for n in stmts[s]}
        owned = {s for cl, copies in layout for s in cl - copies}
        inside = {n for s in c for n in stmts[s]}
        limit = max(self.elements(u) for u in nodes)
        todo = sorted({where[u] for u in nodes})
        out: set = set()
        while todo:
            s = todo.pop()
            if s in out or s in c:
                continue
            out.add(s)
            for n in stmts[s]:
                for u in g.predecessors(n):
                    t = where.get(u)
                    if t is None or t in out or u in inside or is_free(g, u, self.free):
                        continue
                    if t in owned and self.elements(u) < limit:
                        continue            # loaded from its owner
                    todo.append(t)
        return frozenset(out)

    def candidates(self, layout: Layout):
        """(grown consumer, layout) for every kernel that loads intermediates another kernel
        stores: each such array's closure within its producer duplicated into it, and all of
        one producer's; and each array's closure through every kernel (`deep`)."""
        ks = self.kernels(layout)
        owner = self.owners(layout)
        for ci, k in enumerate(ks):
            loaded: dict[int, list[int]] = {}
            for u in k.loads:
                pi = owner.get(u)
                if pi is not None and pi != ci:
                    loaded.setdefault(pi, []).append(u)
            c, copies = layout[ci]
            tried = set()
            for pi in sorted(loaded):
                us = loaded[pi]
                for chosen in [[u] for u in us] + ([us] if len(us) > 1 else []):
                    local = self.upstream(layout[pi][0], chosen)
                    for add, checked in ((local, True),
                                         (self.deep(layout, c, chosen) | local, False)):
                        grown = c | add
                        if grown == c or grown in tried or _splits_apart(self.g, grown):
                            continue
                        tried.add(grown)
                        entry = (grown, copies | (add - c))
                        cand = self.pruned(layout[:ci] + (entry,) + layout[ci + 1:])
                        # loads within the producer's closure come from kernels before it;
                        # through every kernel, one could wait on this consumer
                        if checked or self.valid(cand):
                            yield grown, cand

    def merges(self, layout: Layout):
        """(merged cluster, layout) for the pairs of kernels greedy fusion would try (producer
        and consumer, or two readers of one array), and a kernel with one that also computes
        (recomputes) what it loads, that can merge. Only once kernels overlap: a duplication
        can take away the kernel that lay between two, or compute an array a second time
        where another kernel could use it, and the merge then pays (disjoint kernels are
        greedy fusion's, where no merge helps)."""
        if not any(copies for _, copies in layout):
            return
        clusters = [c for c, _ in layout]
        owned = {c: c - copies for c, copies in layout}
        index = {c: i for i, c in enumerate(clusters)}
        pairs = set(_edges(self.g, self.stmts, clusters, siblings=True, owned=owned))
        computed: dict[int, list[Cluster]] = {}
        for c in clusters:
            for s in c:
                for n in self.stmts[s]:
                    computed.setdefault(n, []).append(c)
        for c, k in zip(clusters, self.kernels(layout)):
            for u in k.loads:
                for p in computed.get(u, ()):
                    if p != c and (c, p) not in pairs:
                        pairs.add((p, c))
        for p, c in sorted(pairs, key=lambda e: (sorted(e[0]), sorted(e[1]))):
            if _splits_apart(self.g, p | c) or \
                    _creates_cycle(self.g, self.stmts, clusters, p, c, owned) or \
                    _creates_cycle(self.g, self.stmts, clusters, c, p, owned):
                continue
            merged = self.pruned(_merged(layout, index[p], index[c]))
            if self.valid(merged):
                yield p | c, merged

    def recompute(self, layout: Layout) -> Layout:
        """Duplicate producers' statements into consumers while that lowers the predicted
        total time, the best duplication first (and, once kernels overlap, merge two kernels
        when that is better still)."""
        current = self.time(layout)
        if current == float("inf"):
            return layout
        while True:
            known = {k: _time(self.planner, k) for k in self.kernels(layout)}
            best = None
            for grown, cand in itertools.chain(self.candidates(layout), self.merges(layout)):
                # the first of equally good moves wins (the candidates' order is fixed)
                bound = current * (1 - RELATIVE) if best is None else best[0]
                t = self._total_below(cand, grown, known, bound)
                if t is not None:
                    best = (t, cand)
            if best is None:
                return layout
            current, layout = best

    def _total_below(self, layout: Layout, first: Cluster, known: dict, bound: float):
        """The layout's total time if below `bound`, else None. The kernels it shares with
        the layout before (`known`: kernel -> time) are not estimated again; the new ones (a
        duplication changes few: the consumer, the producer, what died) are estimated the
        grown consumer (`first`) first, stopping once the sum reaches the bound."""
        ks = self.kernels(layout)
        total = sum(known[k] for k in ks if k in known)
        fresh = sorted((k for k in ks if k not in known),
                       key=lambda k: -len(first.intersection(k.equations)))
        for k in fresh:
            if total >= bound:
                return None
            total += _time(self.planner, k)
        return total if total < bound else None

    def without_copies(self, layout: Layout, i: int) -> Layout:
        """The layout with kernel `i` loading what it recomputes."""
        c, copies = layout[i]
        return layout[:i] + ((c - copies, frozenset()),) + layout[i + 1:]

    def settled(self, layout: Layout) -> Layout:
        """The same kernels, a statement that several compute and none stores owned by the
        first of them to launch (the others recompute it: what explain says). Ownership
        decides only stores, so nothing else changes."""
        ks = self.kernels(layout)
        if not any(copies for _, copies in layout):
            return layout
        position = {id(k): r for r, k in enumerate(_topological(self.g, ks))}
        stored = {n for k in ks for n in k.stores}
        where: dict[int, list[int]] = {}
        for i, (c, _) in enumerate(layout):
            for s in c:
                where.setdefault(s, []).append(i)
        copies = [set(cp) for _, cp in layout]
        for s, holders in where.items():
            if len(holders) < 2 or any(n in stored for n in self.stmts[s]):
                continue
            first = min(holders, key=lambda i: position[id(ks[i])])
            for i in holders:
                (copies[i].discard if i == first else copies[i].add)(s)
        return tuple((c, frozenset(cp)) for (c, _), cp in zip(layout, copies))

    def valid(self, layout: Layout) -> bool:
        """Whether the layout's kernels can launch in some order: what each loads, an input
        or stored by another, with no cycle among them."""
        ks = self.kernels(layout)
        storer = {n: i for i, k in enumerate(ks) for n in k.stores}
        dag = nx.DiGraph()
        dag.add_nodes_from(range(len(ks)))
        for i, k in enumerate(ks):
            for u in k.loads:
                if u in storer:
                    dag.add_edge(storer[u], i)
                elif not isinstance(ir.op(self.g, u), ir.Input):
                    return False
        return nx.is_directed_acyclic_graph(dag)


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


def _edges(g, stmts, clusters, siblings: bool = False, owned: dict | None = None):
    """Producer -> consumer pairs of clusters; with `siblings`, also pairs reading one array.
    With `owned` (cluster -> the statements it owns) the clusters may overlap: a cluster reads
    from the owner of what it does not compute itself."""
    owner = {n: c for c in clusters for s in (c if owned is None else owned[c])
             for n in stmts[s]}
    seen = set()
    readers: dict[int, list] = {}
    for c in clusters:
        inside = None if owned is None else {n for s in c for n in stmts[s]}
        for s in c:
            for n in stmts[s]:
                for u in g.predecessors(n):
                    if inside is not None and u in inside:
                        continue
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


def _creates_cycle(g, stmts, clusters, p: Cluster, c: Cluster, owned: dict | None = None) -> bool:
    """Merging p and c is illegal if another kernel lies on a path between them (`owned` as
    for `_edges`)."""
    dag = nx.DiGraph()
    for cl in clusters:
        dag.add_node(cl)
    if owned is None:
        owner = {n: cl for cl in clusters for s in cl for n in stmts[s]}
        for n, cl in owner.items():
            for v in g.successors(n):
                other = owner.get(v)
                if other is not None and other != cl:
                    dag.add_edge(cl, other)
    else:
        inside = {cl: {n for s in cl for n in stmts[s]} for cl in clusters}
        where: dict[int, list] = {}
        for cl in clusters:
            for n in inside[cl]:
                where.setdefault(n, []).append(cl)
        for cl in clusters:
            for s in owned[cl]:
                for n in stmts[s]:
                    for v in g.successors(n):
                        for other in where.get(v, ()):
                            if n not in inside[other]:
                                dag.add_edge(cl, other)
    for path_start in dag.successors(p):
        if path_start != c and nx.has_path(dag, path_start, c):
            return True
    return False


def _join(names: list[str]) -> str:
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _reasons(lay: _Layouts, layout: Layout, i: int) -> str:
    """Why kernel `i` of the layout does not also take in its neighbours."""
    g, stmts, planner = lay.g, lay.stmts, lay.planner
    clusters = [c for c, _ in layout]
    owned = {c: c - copies for c, copies in layout} if any(cp for _, cp in layout) else None
    ks = lay.kernels(layout)
    index = {cl: j for j, cl in enumerate(clusters)}
    c = clusters[i]
    parts = []
    for p, q in _edges(g, stmts, clusters, owned=owned):
        if q != c:
            continue
        j = index[p]
        stored = sorted({array_name(g, n) for n in ks[j].stores})
        verb = "go" if len(stored) > 1 else "goes"
        merged = _merged(layout, j, i)
        t_sep, t_fused = lay.time(layout, j) + lay.time(layout, i), lay.time(merged, 0)
        if _creates_cycle(g, stmts, clusters, p, c, owned):
            why = "another kernel lies between them"
        elif _splits_apart(g, p | c):
            why = "the merge of split partial states is its own kernel"
        elif t_fused == float("inf"):
            why = "no tiling of the fused kernel fits in memory"
        else:
            fmt = _fmt if planner.target.processors else _units
            why = f"fused it would take {fmt(t_fused)} instead of {fmt(t_sep)}" + \
                _factor(planner, lay.kernels(merged)[0], ks[j], ks[i])
        parts.append(f"{_join(stored)} {verb} through global memory: {why}")
    return "; ".join(parts)


def _merged(layout: Layout, j: int, i: int) -> Layout:
    """The layout with kernels j and i fused (first)."""
    (p, cp), (c, cc) = layout[j], layout[i]
    copies = (cp | cc) - (p - cp) - (c - cc)
    return ((p | c, copies),) + tuple(e for k, e in enumerate(layout) if k not in (i, j))


def _recomputes(lay: _Layouts, layout: Layout, i: int) -> str:
    """What kernel `i` recomputes rather than loads, and what that saves."""
    c, copies = layout[i]
    if not copies:
        return ""
    g = lay.g
    eqs = {e.stmt: e.name for e in g.graph["equations"]}
    names = [eqs.get(s, f"#{s}") for s in sorted(copies)]
    before = lay.without_copies(layout, i)
    now_loads = set(lay.kernels(layout)[i].loads)
    before_loads = lay.kernels(before)[i].loads
    instead = list(dict.fromkeys(array_name(g, n) for n in before_loads if n not in now_loads))
    sources = list(dict.fromkeys(array_name(g, n) for n in lay.kernels(layout)[i].loads
                                 if n not in before_loads))
    fmt = _fmt if lay.planner.target.processors else _units
    what = f"recomputes {_join(names)}" + (f" from {_join(sources)}" if sources else "")
    if not lay.valid(before):       # loading them would wait on a kernel that waits on this one
        return what + " (loading them would make a cycle of kernels)"
    t_now, t_before = lay.time(layout), lay.time(before)
    return (f"{what} rather than loading {_join(instead)} (all kernels {fmt(t_now)} instead "
            f"of {fmt(t_before)})")


def _factor(planner, merged: FusedKernel, pk: FusedKernel, ck: FusedKernel) -> str:
    merged, a, b = planner.estimate(merged), planner.estimate(pk), planner.estimate(ck)
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
