"""Intermediates computed under the names their readers give them.

Self-attention computes K and V from the sequence Q comes from and reads them with the key
axis renamed: `K[h t d] = X * Wk`, then `S = Q * K[h s d]`. A K read through a renaming
kept attention off FlashAttention (and its backward's chains, which copy their operands as
stored, still are kept off by one). When every reader of a
named intermediate reads it through the same renaming of its axes (here t -> s), its
statement is computed under the readers' names instead, as if the user had written
`K[h s d] = X[s m] * Wk`, and the readers read it plainly:

- the statement's nodes (its ops up to the operands it reads from other statements) get
  their axes renamed: their types, the axes a contraction, reduction, scan or softmax names,
  bare axis indices (`where(s <= t, ...)`), views' labels (a statement that gathers is
  left alone);
- an operand from another statement (an input, another array) with a renamed axis is read
  through a view that renames it (`X[s m]`);
- the readers' views, now identities, are dropped.

It is exact: a view unified the sizes of every pair of names it renames, and nothing
outside the statement changes. It is left alone where the readers disagree (K read as
`K[h s d]` by the scores and as `K[h t d]` by another reader: an output, a second
attention's queries): K is computed once, as written, and FlashAttention reads it through
its view (flash.FlashSite.renamed: the same memory under other names, no second projection;
explain says it); also where a reader takes a diagonal, and where the renaming
would merge two of the statement's axes. A hint names the diagram's axes:

- `group t by 64` (or `--group t=64`) with t moved off K's statement tiles t where t
  remains (Q's projection, attention's queries, O); K's statement, computed along s, has no
  t, and its tiles are the search's, as for any statement without the hinted axis (explain
  says so on K's line). Where no other statement would keep t (cross-attention's keys and
  values projected from their own sequence), the hint would apply to nothing: no renaming
  moves t, K and V stay as written;
- a group hint on the axis the renaming moves onto the statement (`--group s`) keeps it as
  written (the hint would tile a statement the user wrote without s);
- a `stream`, `split` or `lanes` hint names a reduced axis, which the renaming never moves.

The equation keeps its name; `g.graph["renamed"]` records (array, ((user's, new), ...)),
which explain says (`said`) so that the user's names can be read back, and
`g.graph["renamed_grouped"]` the hinted axes moved off a statement.
"""

from __future__ import annotations

from dataclasses import replace

from .graph import DiGraph

from . import ir

_AXES_OPS = (ir.Contract, ir.Reduce, ir.Scan, ir.Softmax)


def store_renamed(g: DiGraph, grouped=()) -> None:
    """Rewrite, in place (canonicalize's copy), every intermediate all of whose readers read
    it through one renaming so that it is computed under the readers' names; `grouped`: axes
    a `group` hint names (module doc: one the renaming moves off a statement must stay on
    another, one it moves onto a statement is never moved)."""
    grouped = set(grouped) | {h.axis for h in g.graph.get("hints", ()) if h.kind == "group"}
    kept = set()                    # hinted axes no renaming moves off: none keeps them
    while grouped - kept:
        trial = g.copy()
        lost = {x for x in _store_renamed(trial, grouped, kept)
                if not any(x in ir.type_of(trial, n).axes for n in trial
                           if not isinstance(ir.op(trial, n), ir.Input))}
        if not lost:
            break
        kept |= lost
    moved = _store_renamed(g, grouped, kept)
    if moved:
        g.graph["renamed_grouped"] = tuple(sorted(moved))
    for a in ir.order(g):
        if a in g and isinstance(ir.op(g, a), ir.Assign):
            _alias(g, a)


def _read_through(g: DiGraph, a: int, view: int, b: int, readers: list) -> None:
    """`a` only renames an input (`T[s m] = X[s m]`): a's readers read the input through a
    renaming view of their own (as `X[s m] * W` does), so no kernel copies it (and a 16-bit
    input stays a tensor-core operand: T's copy is f32). Not where a reader reads `a` by
    position (a view, gather or reshape of it: their labels are a's layout's), nor where b is
    an intermediate: its copy may be the 16-bit one its products read (a gradient's
    `t22[b s m] = N1[b s m]`, stored16.py), which that decision, made later, keeps."""
    if not isinstance(ir.op(g, b), ir.Input) or \
            any(isinstance(ir.op(g, r), (ir.View, ir.Gather, ir.Reshape)) for r in readers):
        return
    op, stmt = ir.op(g, view), g.nodes[a]["stmt"]
    t = ir.ArrayType(tuple(op.labels), ir.type_of(g, b).dtype)
    for r in readers:
        seen = ir.add_node(g, op, t, (b,), span=g.nodes[r]["span"], stmt=g.nodes[r]["stmt"])
        g.add_edge(seen, r, array=t, ports=g.edges[a, r]["ports"])
    name, of = ir.op(g, a).name, ir.op(g, b).name
    g.remove_nodes_from([a, view])
    g.graph["arrays"] = {k: v for k, v in g.graph["arrays"].items() if v != a}
    g.graph["equations"] = tuple(e for e in g.graph.get("equations", ()) if e.stmt != stmt)
    g.graph["read_through"] = tuple(g.graph.get("read_through", ())) + (
        (name, of, tuple(op.labels)),)


def _store_renamed(g: DiGraph, grouped: set, kept: set) -> set:
    """store_renamed's rewrite, never moving an axis in `kept` nor onto one in `grouped`;
    the hinted axes it moved off statements."""
    moved = set()
    for a in ir.order(g):
        if a in g and isinstance(ir.op(g, a), ir.Assign):
            sigma = _renaming(g, a)
            if sigma and not kept & set(sigma) and not grouped & set(sigma.values()):
                nodes = _statement(g, a, sigma)
                if nodes is not None:
                    _relabel(g, a, nodes, sigma)
                    moved |= grouped & set(sigma)
    return moved


def _alias(g: DiGraph, a: int) -> None:
    """Where `a` only renames another intermediate that nothing else reads (`dV[h d t] =
    g21[h t d]`, a gradient's cotangent of V read along `s`: g21 contracts over t, so its
    statement cannot be computed under the reader's names), lay that one out in a's order
    under its own names (`g21[h d s]`) and let a's readers read it through one renaming view
    (`g21[h d t]`): the same memory, so no kernel copies it (a tensor-core product reads a
    renamed load as its tile, through a reshape too). Not where either is an output (its
    layout is the user's), a declares a dtype or the view is no renaming."""
    (view,) = ir.operands(g, a)
    stmt = g.nodes[a]["stmt"]
    op = ir.op(g, view)
    if not isinstance(op, ir.View) or g.nodes[view]["stmt"] != stmt or \
            len(set(op.labels)) != len(op.labels) or ir.op(g, a).dtype is not None or \
            list(g.successors(view)) != [a]:
        return
    (b,) = ir.operands(g, view)
    readers = list(g.successors(a))
    if any(isinstance(ir.op(g, n), ir.Output) for n in readers + [a]) or not readers:
        return
    if not isinstance(ir.op(g, b), ir.Assign) or list(g.successors(b)) != [view]:
        _read_through(g, a, view, b, readers)
        return
    back = dict(zip(op.labels, ir.type_of(g, b).axes))     # a's name -> b's
    order = tuple(back[x] for x in ir.type_of(g, a).axes)
    t = ir.ArrayType(order, ir.type_of(g, b).dtype)
    g.nodes[b]["type"] = t
    for v in g.successors(b):
        g.edges[b, v]["array"] = t
    labels = ir.type_of(g, a).axes
    for r in readers:
        ports = g.edges[a, r]["ports"]
        seen = ir.add_node(g, ir.View(labels), ir.ArrayType(labels, t.dtype), (b,),
                           span=g.nodes[r]["span"], stmt=g.nodes[r]["stmt"])
        g.add_edge(seen, r, array=ir.type_of(g, seen), ports=ports)
    name, of = ir.op(g, a).name, ir.op(g, b).name
    g.remove_nodes_from([a, view])
    g.graph["arrays"] = {k: v for k, v in g.graph["arrays"].items() if v != a}
    g.graph["equations"] = tuple(
        replace(e, axes=order) if e.stmt == g.nodes[b]["stmt"] else e
        for e in g.graph.get("equations", ()) if e.stmt != stmt)
    g.graph["aliased"] = tuple(g.graph.get("aliased", ())) + ((name, of, order),)


def _renaming(g: DiGraph, a: int) -> dict | None:
    """The one renaming every reader of `a` reads it through (old -> new, moved axes only),
    or None."""
    axes = ir.type_of(g, a).axes
    found = set()
    for r in g.successors(a):
        op = ir.op(g, r)
        if not isinstance(op, ir.View) or len(set(op.labels)) != len(op.labels):
            return None
        found.add(tuple(op.labels))
    if len(found) != 1:
        return None
    sigma = {x: y for x, y in zip(axes, next(iter(found))) if x != y}
    table = g.graph["axes"]
    if not sigma or any(table[x].rep != table[y].rep for x, y in sigma.items()):
        return None
    return sigma


def _statement(g: DiGraph, a: int, sigma: dict) -> list[int] | None:
    """The nodes of `a`'s statement that compute it (a first), or None where one of them is
    read outside it, is a reshape, or the renaming would merge two of its axes."""
    stmt = g.nodes[a]["stmt"]
    nodes, todo = [a], [a]
    while todo:
        for u in ir.operands(g, todo.pop()):
            if u not in nodes and g.nodes[u]["stmt"] == stmt and \
                    not isinstance(ir.op(g, u), (ir.Input, ir.Assign)):
                nodes.append(u)
                todo.append(u)
    inside = set(nodes)
    used = set()
    for n in nodes:
        op = ir.op(g, n)
        if isinstance(op, (ir.Reshape, ir.Gather)) or \
                (n != a and not set(g.successors(n)) <= inside):
            return None
        used |= set(ir.type_of(g, n).axes) | set(getattr(op, "axes", ()))
        used |= {getattr(op, "axis", None)} - {None}
        used |= set(getattr(op, "labels", ())) - {None}
        used |= {x for u in ir.operands(g, n) for x in ir.type_of(g, u).axes}
    renamed = [sigma.get(x, x) for x in used]
    return nodes if len(set(renamed)) == len(renamed) else None


def _relabel(g: DiGraph, a: int, nodes: list[int], sigma: dict) -> None:
    def sub(axes):
        return tuple(sigma.get(x, x) if x is not None else None for x in axes)

    inside = set(nodes)
    for n in nodes:
        node = g.nodes[n]
        op = node["op"]
        if isinstance(op, _AXES_OPS):
            node["op"] = replace(op, axes=sub(op.axes))
        elif isinstance(op, (ir.Index, ir.SizeOf)):
            node["op"] = replace(op, axis=sigma.get(op.axis, op.axis))
        elif isinstance(op, ir.View):
            node["op"] = replace(op, labels=sub(op.labels))
        node["type"] = ir.ArrayType(sub(node["type"].axes), node["type"].dtype)
        for u in dict.fromkeys(ir.operands(g, n)):      # X * X: one edge, two ports
            if u not in inside and sub(ir.type_of(g, u).axes) != ir.type_of(g, u).axes and \
                    not isinstance(op, ir.View):
                _read_renamed(g, u, n, sub)
    for n in nodes:
        for v in g.successors(n):
            g.edges[n, v]["array"] = ir.type_of(g, n)
    for view in list(g.successors(a)):          # identities now: read a itself
        for v in list(g.successors(view)):
            ports = g.edges[view, v]["ports"]
            if g.has_edge(a, v):
                ports = tuple(sorted(g.edges[a, v]["ports"] + ports))
            g.add_edge(a, v, array=ir.type_of(g, a), ports=ports)
        g.remove_node(view)
    name = ir.op(g, a).name
    g.graph["equations"] = tuple(
        replace(e, **{f: sub(getattr(e, f)) for f in
                      ("axes", "contracted", "reduced", "normalised", "broadcast")})
        if e.stmt == g.nodes[a]["stmt"] else e for e in g.graph.get("equations", ()))
    g.graph["renamed"] = tuple(g.graph.get("renamed", ())) + ((name, tuple(sigma.items())),)


def _read_renamed(g: DiGraph, u: int, n: int, sub) -> None:
    """Make `n` read operand `u` (from another statement) through a view renaming its axes
    (`X[s m]`), one view for all of n's ports that read u."""
    t = ir.type_of(g, u)
    view = ir.add_node(g, ir.View(sub(t.axes)), ir.ArrayType(sub(t.axes), t.dtype), (u,),
                       span=g.nodes[n]["span"], stmt=g.nodes[n]["stmt"])
    ports = g.edges[u, n]["ports"]
    g.remove_edge(u, n)
    g.add_edge(view, n, array=ir.type_of(g, view), ports=ports)


def said(g: DiGraph) -> list[str]:
    """One line per array computed under its readers' names (explain)."""
    hinted = set(g.graph.get("renamed_grouped", ()))
    return [f"{name} computed with "
            + ", ".join(f"`{y}` where the diagram writes `{x}`" for x, y in moved)
            + ", as every reader reads it (its tiles are copied as stored)"
            + "".join(f"; the `group {x}` hint tiles the statements that keep `{x}`"
                      for x, _ in moved if x in hinted)
            for name, moved in g.graph.get("renamed", ())] + \
        [f"{name} read as {of} renamed ({of} laid out [{' '.join(order)}] as {name} is: "
         "no copy)" for name, of, order in g.graph.get("aliased", ())] + \
        [f"{name} is {of}[{' '.join(labels)}]: its readers read {of} through that renaming "
         "(no copy)" for name, of, labels in g.graph.get("read_through", ())]
