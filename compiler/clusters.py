"""Statements grouped into kernels (clusters), and the graph between them: what fusion
(fuse.py) and recomputation across kernels (recompute.py) both walk."""

from __future__ import annotations

from .graph import DiGraph, has_path, topological_order

from . import ir, local_merge
from .kernels import FusedKernel
from .split_info import infos

Cluster = frozenset  # of statement indices


def _statements(g: DiGraph) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for n, data in g.nodes(data=True):
        if data["stmt"] is not None and not isinstance(data["op"], (ir.Input, ir.Output)):
            out.setdefault(data["stmt"], set()).add(n)
    return out


def _topological(g: DiGraph, ks: list[FusedKernel]) -> list[FusedKernel]:
    """Launch order: a kernel after the kernels that store what it loads (with overlapping
    kernels, the one that stores a node, not every one that computes it)."""
    storer = {n: i for i, k in enumerate(ks) for n in k.stores}
    dag = DiGraph()
    dag.add_nodes_from(range(len(ks)))
    for i, k in enumerate(ks):
        for u in k.loads:
            if u in storer and storer[u] != i:
                dag.add_edge(storer[u], i)
    return [ks[i] for i in topological_order(dag, key=lambda i: ks[i].equations)]


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
    merge would reduce the splits inside each block, which is the unsplit plan again; so do
    a product read through reshapes and its operands' producers (local_merge.py)."""
    return _split_apart(g, cluster) or local_merge.apart(g, cluster)


def _split_apart(g, cluster: Cluster) -> bool:
    return any(a in cluster and b in cluster for info in infos(g) for a, b in info.apart)


def apart_reason(g, cluster: Cluster) -> str:
    """Why `_splits_apart` holds for a cluster, in explain's words."""
    if _split_apart(g, cluster):
        return "the merge of split partial states is its own kernel"
    return local_merge.apart_reason(g, cluster)


def _creates_cycle(g, stmts, clusters, p: Cluster, c: Cluster, owned: dict | None = None,
                   dag: DiGraph | None = None) -> bool:
    """Merging p and c is illegal if another kernel lies on a path between them (`owned` as
    for `_edges`; `dag`: cluster_dag of these clusters, built once for the pairs a caller
    tries)."""
    if dag is None:
        dag = cluster_dag(g, stmts, clusters, owned)
    for path_start in dag.successors(p):
        if path_start != c and has_path(dag, path_start, c):
            return True
    return False


def cluster_dag(g, stmts, clusters, owned: dict | None = None) -> DiGraph:
    """The clusters as nodes, an edge from each to those reading what it computes (`owned`
    as for `_edges`)."""
    dag = DiGraph()
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
    return dag


def sibling_readers(kernels, eligible) -> list[tuple[int, tuple[int, ...]]]:
    """Kernels that read one array and may share a launch placed where the first of them
    launches (compiler/siblings.py decides whether they do): per array that two or more of the
    `eligible` kernels (indices in launch order) load and per reader of it, (the array, that
    reader and the readers after it whose every producer launches before it). None of them
    then depends on another (each's producers all launch before any of them)."""
    storer = {n: i for i, k in enumerate(kernels) for n in k.stores}
    latest = [max((storer[u] for u in k.loads if u in storer), default=-1) for k in kernels]
    readers: dict[int, list[int]] = {}
    for i in sorted(eligible):
        for u in dict.fromkeys(kernels[i].loads):
            readers.setdefault(u, []).append(i)
    found = []
    for u, ks in readers.items():
        for i, first in enumerate(ks):
            group = (first,) + tuple(j for j in ks[i + 1:] if latest[j] < first)
            if len(group) >= 2:
                found.append((u, group))
    return found
