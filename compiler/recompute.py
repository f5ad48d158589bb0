"""Recomputation across kernels: layouts of kernels that may overlap, and the search for
duplications that pay (fuse.py's module docstring says what and why)."""

from __future__ import annotations

import functools
import itertools

from .graph import DiGraph, is_dag

from . import ir
from .clusters import (Cluster, _creates_cycle, _edges, _splits_apart, _topological,
                       cluster_dag)
from .cost import LAUNCH_SECONDS
from .kernels import FusedKernel, fused_kernel, is_free
from .recompute_moves import moves

# A layout: the kernels as (cluster, copies) pairs, `copies` the statements of `cluster` that
# another kernel owns (and stores when needed): computed here again rather than loaded.
Layout = tuple
RELATIVE = 1e-9      # a recomputation is kept when it saves more than this share of the time


def _time(planner, k: FusedKernel) -> float:
    p = planner.estimate(k)
    return float("inf") if p is None else p.cost.time


def _floor(planner) -> float:
    """The least time any kernel's estimate predicts: its launch (cost.evaluate's overhead,
    scatter.cost's two), on a target of processors; 0 on the paper's machine."""
    return LAUNCH_SECONDS if planner.target.processors else 0.0


class _Layouts:
    """Kernels that may overlap: their stores by ownership, their times, and the search for
    recomputations that pay (see the module docstring)."""

    def __init__(self, g, stmts, kernel, planner, worse=None):
        self.g, self.stmts, self.kernel, self.planner = g, stmts, kernel, planner
        # worse(before, after, gain, current): whether the full search prices a close move's
        # kernels slower, which `recompute` then does not make (confirm.py)
        self.worse = worse
        self.free: dict = {}
        self.outputs = frozenset(u for o in g.graph["outputs"].values()
                                 for u in g.predecessors(o))
        self._overlapping = functools.cache(self._overlapping_kernel)
        self._upstream = functools.cache(self._upstream_of)   # (asked again every round)
        self._owned = functools.cache(self._owned_nodes)
        self._needed: dict = {}       # layout -> needed(layout) (pruning, validity and timing
                                      # ask it of the same layouts again)

    def _overlapping_kernel(self, c: Cluster, copies: Cluster, needed: frozenset) -> FusedKernel:
        nodes = set().union(*(self.stmts[s] for s in c))
        return fused_kernel(self.g, "k?", nodes, needed=needed, recomputed=tuple(copies))

    def owners(self, layout: Layout) -> dict[int, int]:
        """Node -> the kernel owning its statement."""
        owner: dict = {}
        for i, entry in enumerate(layout):
            owner.update(dict.fromkeys(self._owned(entry), i))
        return owner

    def _owned_nodes(self, entry) -> tuple:
        """The nodes of the statements a layout's (cluster, copies) owns."""
        c, copies = entry
        return tuple(n for s in c - copies for n in self.stmts[s])

    def needed(self, layout: Layout) -> list[frozenset]:
        """Per kernel, what it must store: the nodes it owns that an output is, or that a
        kernel not computing them loads."""
        found = self._needed.get(layout)
        if found is None:
            found = self._needed[layout] = self._needed_by(layout)
        return list(found)

    def _needed_by(self, layout: Layout) -> tuple[frozenset, ...]:
        owner = self.owners(layout)
        need: list[set] = [set() for _ in layout]
        for c, _ in layout:
            for u in self.kernel(c).loads:        # (what a kernel loads is not what it stores)
                if u in owner:
                    need[owner[u]].add(u)
        for u in self.outputs:
            if u in owner:
                need[owner[u]].add(u)
        return tuple(frozenset(x) for x in need)

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
        return self._upstream(producer, frozenset(nodes))

    def _upstream_of(self, producer: Cluster, nodes: frozenset) -> Cluster:
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
        yield from self._together(layout, ks, owner)

    def _together(self, layout: Layout, ks, owner):
        """(first grown consumer, layout) for every array two or more kernels load from
        another's: all of them recomputing it through every kernel at once. One alone may lose
        (the producer stays, for the others); all of them can drop the producer: the d = 128
        backward of attention, whose dQ and dK kernels each recompute the scores and dS
        rather than load dS from a kernel that stores P and dS."""
        readers: dict[int, list[int]] = {}
        for ci, k in enumerate(ks):
            for u in k.loads:
                if owner.get(u) not in (None, ci):
                    readers.setdefault(u, []).append(ci)
        for u, cis in sorted(readers.items()):
            if len(cis) < 2:
                continue
            new, first = list(layout), None
            for ci in cis:
                c, copies = layout[ci]
                add = self.deep(layout, c, [u]) | self.upstream(layout[owner[u]][0], [u])
                if _splits_apart(self.g, c | add):
                    break
                new[ci] = (c | add, copies | (add - c))
                first = first or c | add
            else:
                cand = self.pruned(tuple(new))
                if self.valid(cand):
                    yield first, cand

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
        dag = cluster_dag(self.g, self.stmts, clusters, owned)    # (one for every pair)
        for p, c in sorted(pairs, key=lambda e: (sorted(e[0]), sorted(e[1]))):
            if _splits_apart(self.g, p | c) or \
                    _creates_cycle(self.g, self.stmts, clusters, p, c, owned, dag) or \
                    _creates_cycle(self.g, self.stmts, clusters, c, p, owned, dag):
                continue
            merged = self.pruned(_merged(layout, index[p], index[c]))
            if self.valid(merged):
                yield p | c, merged

    def recompute(self, layout: Layout) -> Layout:
        """Duplicate producers' statements into consumers while that lowers the predicted
        total time, the best duplication first (and, once kernels overlap, merge two kernels
        when that is better still; where neither helps, move a stored statement from one
        kernel into another: recompute_moves.py); a close move the full search prices slower
        (`worse`) is not made, the next best looked for instead."""
        current = self.time(layout)
        if current == float("inf"):
            return layout
        refused: set = set()
        while True:
            known = {k: _time(self.planner, k) for k in self.kernels(layout)}
            best = self._best(itertools.chain(self.candidates(layout), self.merges(layout)),
                              known, current, refused)
            if best is None:    # (moves asked last: they are many, and rarely pay)
                best = self._best(moves(self, layout), known, current, refused)
            if best is None:
                return layout
            if self.worse is not None and self.worse(self.kernels(layout), self.kernels(best[1]),
                                                     current - best[0], current):
                refused.add(best[1])
                continue
            current, layout = best

    def _best(self, moves, known: dict, current: float, refused: set):
        """(total, layout) of the move saving the most below `current`, or None."""
        best = None
        for grown, cand in moves:
            if cand in refused:
                continue
            # the first of equally good moves wins (the candidates' order is fixed)
            bound = current * (1 - RELATIVE) if best is None else best[0]
            t = self._total_below(cand, grown, known, bound)
            if t is not None:
                best = (t, cand)
        return best

    def _total_below(self, layout: Layout, first: Cluster, known: dict, bound: float):
        """The layout's total time if below `bound`, else None. The kernels it shares with
        the layout before (`known`: kernel -> time) are not estimated again; the new ones (a
        duplication changes few: the consumer, the producer, what died) are estimated the
        grown consumer (`first`) first, stopping once the sum reaches the bound."""
        ks = self.kernels(layout)
        total = sum(known[k] for k in ks if k in known)
        fresh = sorted((k for k in ks if k not in known),
                       key=lambda k: -len(first.intersection(k.equations)))
        floor = _floor(self.planner)
        for i, k in enumerate(fresh):
            least = total     # (each kernel left takes at least the launch: not estimated)
            for _ in fresh[i:]:
                least += floor
            if least >= bound:
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
        dag = DiGraph()
        dag.add_nodes_from(range(len(ks)))
        for i, k in enumerate(ks):
            for u in k.loads:
                if u in storer:
                    dag.add_edge(storer[u], i)
                elif not isinstance(ir.op(self.g, u), ir.Input):
                    return False
        return is_dag(dag)


def _merged(layout: Layout, j: int, i: int) -> Layout:
    """The layout with kernels j and i fused (first)."""
    (p, cp), (c, cc) = layout[j], layout[i]
    copies = (cp | cc) - (p - cp) - (c - cc)
    return ((p | c, copies),) + tuple(e for k, e in enumerate(layout) if k not in (i, j))
