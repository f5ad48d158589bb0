"""napkin's own digraph against networkx (a test dependency only, the oracle here): random
graphs with and without cycles, every algorithm and the editing semantics the IR relies on."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from napkin.compiler.graph import (DiGraph, ancestors, descendants, find_cycle, has_path,
                                   is_dag, ordered, topological_order)


@st.composite
def graphs(draw, acyclic: bool | None = None):
    n = draw(st.integers(1, 14))
    ids = draw(st.permutations(range(100, 100 + n)))  # insertion order unlike the ids' order
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    if acyclic is None:
        acyclic = draw(st.booleans())
    ours, theirs = DiGraph(), nx.DiGraph()
    for i in ids:
        ours.add_node(i, w=i % 7)
        theirs.add_node(i, w=i % 7)
    for a, b in pairs:
        if a == b or (acyclic and a > b):
            continue
        u, v = ids[a], ids[b]
        ours.add_edge(u, v, k=(a, b))
        theirs.add_edge(u, v, k=(a, b))
    return ours, theirs


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_views_and_reachability_match_networkx(pair):
    ours, theirs = pair
    assert list(ours) == list(theirs) and list(ours.nodes) == list(theirs.nodes)
    assert ours.nodes(data=True) == list(theirs.nodes(data=True))
    assert ours.edges(data=True) == list(theirs.edges(data=True))
    assert list(ours.edges) == list(theirs.edges) and len(ours.edges) == len(theirs.edges)
    for n in theirs:
        assert ours.nodes[n] == theirs.nodes[n]
        assert list(ours.successors(n)) == list(theirs.successors(n))
        assert list(ours.predecessors(n)) == list(theirs.predecessors(n))
        assert ours.in_edges(n, data=True) == list(theirs.in_edges(n, data=True))
        assert ours.out_edges(n) == list(theirs.out_edges(n))
        assert (ours.in_degree(n), ours.out_degree(n)) == (theirs.in_degree(n), theirs.out_degree(n))
        assert ancestors(ours, n) == nx.ancestors(theirs, n)
        assert descendants(ours, n) == nx.descendants(theirs, n)
        for m in theirs:
            assert has_path(ours, n, m) == nx.has_path(theirs, n, m)
            assert ours.has_edge(n, m) == theirs.has_edge(n, m)
    assert is_dag(ours) == nx.is_directed_acyclic_graph(theirs)


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_a_cycle_found_is_a_cycle_and_none_only_when_acyclic(pair):
    ours, theirs = pair
    cycle = find_cycle(ours)
    if cycle is None:
        assert nx.is_directed_acyclic_graph(theirs)
    else:
        assert cycle and all(ours.has_edge(a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1]))


@settings(max_examples=150, deadline=None)
@given(graphs(acyclic=True))
def test_topological_order_is_networkx_lexicographic_one(pair):
    ours, theirs = pair
    assert topological_order(ours) == list(nx.lexicographical_topological_sort(theirs))
    key = lambda n: (ours.nodes[n]["w"], -n)  # noqa: E731
    assert topological_order(ours, key=key) == list(
        nx.lexicographical_topological_sort(theirs, key=key))


@settings(max_examples=60, deadline=None)
@given(graphs(acyclic=True), st.data())
def test_the_remembered_order_follows_every_edit(pair, data):
    """`ordered` is computed once per version of the graph: after each edit (a node added, an
    edge added or removed, a node removed) it is the order networkx finds for the edited
    graph, never the one remembered from before."""
    ours, theirs = pair
    assert ordered(ours) == tuple(nx.lexicographical_topological_sort(theirs))
    for _ in range(4):
        nodes = list(theirs)
        edit = data.draw(st.sampled_from(["node", "edge", "unedge", "unnode"]))
        if edit == "node":
            n = data.draw(st.integers(0, 99))   # (smaller than every id: first when ready)
            ours.add_node(n)
            theirs.add_node(n)
        elif edit == "edge":
            u, v = sorted(data.draw(st.permutations(nodes))[:2]) if len(nodes) > 1 else (0, 0)
            if u == v or nx.has_path(theirs, v, u):
                continue
            ours.add_edge(u, v)
            theirs.add_edge(u, v)
        elif edit == "unedge" and theirs.number_of_edges():
            u, v = data.draw(st.sampled_from(list(theirs.edges)))
            ours.remove_edge(u, v)
            theirs.remove_edge(u, v)
        elif edit == "unnode" and len(nodes) > 1:
            n = data.draw(st.sampled_from(nodes))
            ours.remove_node(n)
            theirs.remove_node(n)
        assert ordered(ours) == tuple(nx.lexicographical_topological_sort(theirs))


def test_topological_order_refuses_a_cycle():
    g = DiGraph()
    g.add_edge(1, 2)
    g.add_edge(2, 1)
    with pytest.raises(ValueError):
        topological_order(g)


@settings(max_examples=80, deadline=None)
@given(graphs(), st.data())
def test_copy_subgraph_and_removal_semantics(pair, data):
    ours, theirs = pair
    ours.graph["axes"] = {"x": 3}
    twin = ours.copy()
    twin.graph["axes"] = {}
    for n in twin:
        twin.nodes[n]["w"] = -1  # copied attribute dicts: the original keeps its own
    assert ours.graph["axes"] == {"x": 3}
    assert all(ours.nodes[n]["w"] == theirs.nodes[n]["w"] for n in theirs)
    keep = data.draw(st.sets(st.sampled_from(list(theirs))))
    sub = ours.subgraph(keep)
    assert sub.edges(data=True) == list(theirs.subgraph(keep).edges(data=True))
    gone = data.draw(st.lists(st.sampled_from(list(theirs)), max_size=4))
    ours.remove_nodes_from(gone)
    theirs.remove_nodes_from(gone)
    assert ours.edges(data=True) == list(theirs.edges(data=True))
    assert all(ancestors(ours, n) == nx.ancestors(theirs, n) for n in theirs)
    for u, v in list(theirs.edges)[:3]:
        ours.remove_edge(u, v)
        theirs.remove_edge(u, v)
    assert list(ours.edges) == list(theirs.edges)
    with pytest.raises(KeyError):
        ours.remove_edge(-5, -6)


def test_add_edge_updates_attributes_and_adds_nodes():
    g = DiGraph()
    g.add_edge("a", "b", ports=(0,))
    g.add_edge("a", "b", array=1)
    assert g.edges["a", "b"] == {"ports": (0,), "array": 1} and list(g) == ["a", "b"]
    g.add_node("a", op=2)
    assert g.nodes["a"] == {"op": 2} and g.number_of_nodes() == 2 and ("a", "b") in g.edges


def test_the_front_end_does_not_import_networkx():
    """`napkin check` must answer within twice NumPy's import: networkx's import alone is
    longer than that budget allows, so nothing on the check path may import it."""
    import subprocess
    import sys
    code = ("import sys, napkin; napkin.load('attention'); "
            "import napkin.cli; print('networkx' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
