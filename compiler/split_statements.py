"""After the split rewrite (`compiler/split_rewrite.py`): a statement holding both an array
read whole and values over the split axes is cut in two, since no kernel can store arrays
that share no axis to tile."""

from __future__ import annotations

from .graph import DiGraph

from . import ir
from .kernels import is_free


def separate_copies(g: DiGraph, before: set, merges: set, parts: set, axis: str) -> bool:
    """A statement that computes both an array still read whole (by the last pass of a
    standalone softmax) and values over the split axes gets a second statement, so that no
    kernel has to store both (they share no axis to tile): outside the partial and merge
    statements the copy over the split axes moves (`<name>.split`, fusing with the partial
    kernel that reads it); in a partial statement the whole array does (`<name>.whole`)."""
    eqs = list(g.graph["equations"])
    by_stmt = {e.stmt: e for e in eqs}
    old, new = {}, {}
    for n, data in g.nodes(data=True):
        stmt = data["stmt"]
        if stmt is None or stmt in merges or isinstance(data["op"], (ir.Input, ir.Output)):
            continue
        if n not in before:
            new.setdefault(stmt, []).append(n)
        elif not is_free(g, n):     # (constants and sizes are computed wherever they are read)
            old.setdefault(stmt, []).append(n)
    nxt = max([e.stmt for e in eqs] + [d["stmt"] for _, d in g.nodes(data=True)
                                       if d["stmt"] is not None] + [-1]) + 1
    for stmt in sorted(set(old) & set(new)):
        moved, suffix = (old[stmt], "whole") if stmt in parts else (new[stmt], "split")
        if stmt in parts and not any(v for n in moved for v in g.successors(n)
                                     if g.nodes[v]["stmt"] != stmt):
            continue        # read by the partial alone: it stays there
        for n in moved:
            g.nodes[n]["stmt"] = nxt
        if suffix == "split":
            _own_copies(g, moved, stmt, nxt)
        else:
            _keep_what_the_partial_reads(g, stmt, nxt, axis)
        info = by_stmt.get(stmt)
        if info is not None:
            eqs.append(ir.EquationInfo(f"{info.name.removesuffix('.part')}.{suffix}", info.axes,
                                       info.contracted, info.reduced, info.normalised,
                                       info.broadcast, info.node, info.span, nxt))
        nxt += 1
    g.graph["equations"] = tuple(eqs)
    return bool(set(old) & set(new))


def _keep_what_the_partial_reads(g: DiGraph, part: int, whole: int, axis: str) -> None:
    """The partial statement computes for itself what it read of the whole copy without the
    split axis (a scalar such as `0.5 + X0` in `softmax[l]((0.5 + X0) * l)`): the whole
    statement would otherwise store it beside its array over `axis`, and no kernel tiles a
    scalar and an array together (a fuzz case of 2026-12-06)."""
    readers = [n for n, d in g.nodes(data=True) if d["stmt"] == part and any(
        g.nodes[a]["stmt"] == whole and axis not in ir.type_of(g, a).axes
        for a in ir.operands(g, n))]
    _own_copies(g, readers, whole, part, keep=lambda u: axis not in ir.type_of(g, u).axes)


def _own_copies(g: DiGraph, moved: list, stmt: int, new: int, keep=None) -> None:
    """The moved copy computes for itself what it read of the statement it left (a shared
    scalar such as `X1 / 2`): that statement would otherwise store it beside its array, and
    no kernel tiles a scalar and an array together."""
    made: dict[int, int] = {}

    def copy(u: int) -> int:
        if u not in made:
            args = [copy(a) if g.nodes[a]["stmt"] == stmt else a for a in ir.operands(g, u)]
            made[u] = ir.add_node(g, ir.op(g, u), ir.type_of(g, u), args,
                                  span=g.nodes[u]["span"], stmt=new)
        return made[u]
    for m in moved:
        for u in [a for a in ir.operands(g, m) if g.nodes[a]["stmt"] == stmt
                  and (keep is None or keep(a))]:
            ports = g.edges[u, m]["ports"]
            c = copy(u)
            g.remove_edge(u, m)
            if g.has_edge(c, m):
                g.edges[c, m]["ports"] = g.edges[c, m]["ports"] + ports
            else:
                g.add_edge(c, m, array=ir.type_of(g, c), ports=ports)
