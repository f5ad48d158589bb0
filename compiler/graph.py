"""The directed graph the IR and the planner's small DAGs are made of.

A dict-of-dicts digraph with networkx's interface for the parts napkin uses (node and edge
attribute dicts, `successors`/`predecessors`, `in_edges`/`out_edges`, `copy`, `subgraph`) and
the few algorithms it needs (ancestors, descendants, reachability, acyclicity, the
lexicographic topological order, one cycle). networkx itself used to be the graph here; its
import alone takes longer than NumPy's (about 110 ms against 60 ms, measured by
`benchmarks/compile_time.py`), which put `napkin check` over its budget of twice NumPy's
import, and napkin used none of what makes the library worth that: so the graph is these
hundred lines, with the same semantics (insertion-ordered nodes and edges; `copy` copies the
attribute dicts one level deep, as networkx's does).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator


class _OverNodes:
    """Iteration, length and membership over a `_node` dict (the graph and its node view)."""

    __slots__ = ()
    _node: dict

    def __iter__(self) -> Iterator:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, n) -> bool:
        return n in self._node


class _Nodes(_OverNodes):
    """`g.nodes`: iterate the nodes, `g.nodes[n]` their attribute dict, `g.nodes(data=True)`."""

    __slots__ = ("_node",)

    def __init__(self, node: dict):
        self._node = node

    def __getitem__(self, n) -> dict:
        return self._node[n]

    def __call__(self, data: bool | str = False, default=None):
        if data is False:
            return list(self._node)
        if data is True:
            return list(self._node.items())
        return [(n, d.get(data, default)) for n, d in self._node.items()]

    def items(self):
        return self._node.items()


class _Edges:
    """`g.edges`: iterate `(u, v)`, `g.edges[u, v]` the attribute dict, `g.edges(data=True)`."""

    __slots__ = ("_succ",)

    def __init__(self, succ: dict):
        self._succ = succ

    def __getitem__(self, uv) -> dict:
        u, v = uv
        return self._succ[u][v]

    def __iter__(self) -> Iterator:
        return ((u, v) for u, nbrs in self._succ.items() for v in nbrs)

    def __len__(self) -> int:
        return sum(len(nbrs) for nbrs in self._succ.values())

    def __contains__(self, uv) -> bool:
        u, v = uv
        return u in self._succ and v in self._succ[u]

    def __call__(self, data: bool = False):
        if data:
            return [(u, v, d) for u, nbrs in self._succ.items() for v, d in nbrs.items()]
        return list(self)


class DiGraph(_OverNodes):
    """A directed graph with attribute dicts on the graph (`graph`), nodes and edges.

    `version` counts the changes to its nodes and edges (not to their attribute dicts): a
    result computed from the structure alone holds while it is unchanged (`ordered`)."""

    version = 0
    _ordered: tuple | None = None     # (version, the lexicographic topological order)

    def __init__(self):
        self.graph: dict = {}
        self._node: dict = {}
        self._succ: dict = {}
        self._pred: dict = {}
        self._nodes = _Nodes(self._node)   # (the node view: built once, read often)

    # -- views ---------------------------------------------------------------------------
    @property
    def nodes(self) -> _Nodes:
        return self._nodes

    @property
    def edges(self) -> _Edges:
        return _Edges(self._succ)

    def number_of_nodes(self) -> int:
        return len(self._node)

    def number_of_edges(self) -> int:
        return len(self.edges)

    def has_node(self, n) -> bool:
        return n in self._node

    def has_edge(self, u, v) -> bool:
        return u in self._succ and v in self._succ[u]

    def successors(self, n) -> Iterator:
        return iter(self._succ[n])

    def predecessors(self, n) -> Iterator:
        return iter(self._pred[n])

    def in_edges(self, n, data: bool = False) -> list:
        return [(u, n, d) if data else (u, n) for u, d in self._pred[n].items()]

    def out_edges(self, n, data: bool = False) -> list:
        return [(n, v, d) if data else (n, v) for v, d in self._succ[n].items()]

    def in_degree(self, n) -> int:
        return len(self._pred[n])

    def out_degree(self, n) -> int:
        return len(self._succ[n])

    # -- changes -------------------------------------------------------------------------
    def add_node(self, n: Hashable, **attr) -> None:
        if n not in self._node:
            self._node[n], self._succ[n], self._pred[n] = {}, {}, {}
            self.version += 1
        self._node[n].update(attr)

    def add_nodes_from(self, nodes: Iterable) -> None:
        for n in nodes:
            self.add_node(n)

    def add_edge(self, u: Hashable, v: Hashable, **attr) -> None:
        self.add_node(u)
        self.add_node(v)
        d = self._succ[u].get(v)
        if d is None:
            d = self._succ[u][v] = self._pred[v][u] = {}
            self.version += 1
        d.update(attr)

    def add_edges_from(self, edges: Iterable) -> None:
        for u, v in edges:
            self.add_edge(u, v)

    def remove_edge(self, u, v) -> None:
        del self._succ[u][v]
        del self._pred[v][u]
        self.version += 1

    def remove_node(self, n) -> None:
        for v in self._succ.pop(n):
            del self._pred[v][n]
        for u in self._pred.pop(n):
            del self._succ[u][n]
        del self._node[n]
        self.version += 1

    def remove_nodes_from(self, nodes: Iterable) -> None:
        for n in list(nodes):
            if n in self._node:
                self.remove_node(n)

    # -- new graphs ----------------------------------------------------------------------
    def copy(self) -> DiGraph:
        """A new graph; the graph's, nodes' and edges' attribute dicts copied one level deep."""
        return self._induced(self._node, copy=True)

    def subgraph(self, nodes: Iterable) -> DiGraph:
        """The graph induced on `nodes` (sharing the attribute dicts: read it, do not edit)."""
        keep = set(nodes)
        return self._induced([n for n in self._node if n in keep], copy=False)

    def _induced(self, nodes: Iterable, copy: bool) -> DiGraph:
        new = DiGraph()
        new.graph = dict(self.graph)
        for n in nodes:
            new._node[n] = dict(self._node[n]) if copy else self._node[n]
            new._succ[n], new._pred[n] = {}, {}
        for u in new._node:
            for v, d in self._succ[u].items():
                if v in new._node:
                    new._succ[u][v] = new._pred[v][u] = dict(d) if copy else d
        return new


# --- algorithms ---------------------------------------------------------------------------

def _reach(adj: dict, start) -> set:
    seen, todo = set(), [start]
    while todo:
        for m in adj[todo.pop()]:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    seen.discard(start)
    return seen


def ancestors(g: DiGraph, n) -> set:
    """Every node with a path to `n` (not `n` itself)."""
    return _reach(g._pred, n)


def descendants(g: DiGraph, n) -> set:
    """Every node `n` has a path to (not `n` itself)."""
    return _reach(g._succ, n)


def has_path(g: DiGraph, source, target) -> bool:
    return source == target or target in _reach(g._succ, source)


def topological_order(g: DiGraph, key: Callable | None = None) -> list:
    """The lexicographic topological order: among the ready nodes, the smallest `key` first
    (the node itself without a key). Raises ValueError on a cycle."""
    key = key or (lambda n: n)
    indegree = {n: len(p) for n, p in g._pred.items()}
    ready = [(key(n), i, n) for i, n in enumerate(g._node) if not indegree[n]]
    heapq.heapify(ready)
    order, rank = [], {n: i for i, n in enumerate(g._node)}
    while ready:
        _, _, n = heapq.heappop(ready)
        order.append(n)
        for m in g._succ[n]:
            indegree[m] -= 1
            if not indegree[m]:
                heapq.heappush(ready, (key(m), rank[m], m))
    if len(order) != len(g._node):
        raise ValueError("the graph has a cycle")
    return order


def ordered(g: DiGraph) -> tuple:
    """`topological_order(g)` (smallest node first), computed once per version of the graph
    (fusion's candidate kernels list their members in it, thousands a plan)."""
    found = g._ordered
    if found is None or found[0] != g.version:
        found = g._ordered = (g.version, tuple(topological_order(g)))
    return found[1]


def find_cycle(g: DiGraph) -> list | None:
    """The nodes of one directed cycle in order, or None when the graph is acyclic."""
    state: dict = {}
    for root in g._node:
        if root in state:
            continue
        path, stack = [root], [iter(g._succ[root])]
        state[root] = "open"
        while stack:
            m = next(stack[-1], None)
            if m is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state.get(m) == "open":
                return path[path.index(m):]
            elif m not in state:
                state[m] = "open"
                path.append(m)
                stack.append(iter(g._succ[m]))
    return None


def is_dag(g: DiGraph) -> bool:
    return find_cycle(g) is None


__all__ = ["DiGraph", "ancestors", "descendants", "find_cycle", "has_path", "is_dag",
           "ordered", "topological_order"]
