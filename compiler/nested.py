"""Nested reductions as statements of their own: fusion's units are statements, so a
reduction read inside another reduction of the same statement (`gelu(A * B) * D`,
`softmax[x](S) * V`, `rmsnorm(X) * W` written in one line) gets a statement, as if the
user had named it, and so does each of two products side by side (`silu(X * Wg) * (X *
Wu)`: swiglu in one line); fusion then puts them back in one kernel or stores the inner
result, whichever its model predicts faster."""

from __future__ import annotations

from .graph import DiGraph

from . import ir
from .canonical import dead_code
from .kernels import is_free
from .split_region import redirect
from .split_statements import _own_copies

HEAVY = (ir.Contract, ir.Reduce, ir.Scan, ir.Softmax)   # what is not elementwise
LONGEST = 32        # a derived name's expression longer than this is shortened


def separate_nested(g: DiGraph) -> DiGraph:
    """The IR with every reduction, contraction, softmax or scan that another one of its
    statement reads (through elementwise ops) in a statement of its own (a copy): the
    statement `<name>:<expression>` (`C:gelu(contract[l])`), computing the inner op, what
    it reads within the statement (copied: the outer statement keeps its own where it reads
    them too) and the elementwise ops over the same axes applied to it alone."""
    g = g.copy()
    eqs = list(g.graph["equations"])
    names = {e.stmt: e.name for e in eqs}
    nxt = max([e.stmt for e in eqs] + [d["stmt"] for _, d in g.nodes(data=True)
                                       if d["stmt"] is not None] + [-1]) + 1
    heavy: dict[int, int] = {}
    for n, d in g.nodes(data=True):
        if d["stmt"] is not None and _heavy(g, n):
            heavy[d["stmt"]] = heavy.get(d["stmt"], 0) + 1
    cut = False
    within: dict[int, int] = {}     # a new statement -> the user's statement it was cut from
    for stmt in sorted(s for s, count in heavy.items() if count > 1):
        made: dict = {}         # what a cut inner op computes -> that op
        while True:
            inner = _innermost(g, stmt)
            inner = _sibling_product(g, stmt) if inner is None else inner
            if inner is None:
                break
            cut = True
            key = _key(g, inner, stmt)
            if key in made:     # `mean[c](X)` written again: computed (and stored) once
                redirect(g, inner, made[key])     # (the same value, computed once)
                continue
            root = _cut(g, inner, stmt, nxt)
            made[key] = inner
            eqs.append(_equation(g, names.get(stmt, f"#{stmt}"), inner, root, nxt,
                                 set(names.values())))
            names[nxt] = eqs[-1].name
            within[nxt] = within.get(stmt, stmt)
            nxt += 1
    if not cut:
        return g
    g.graph["equations"] = tuple(eqs)
    g.graph["nested"] = tuple(sorted(within.items()))
    return dead_code(g)


def _heavy(g: DiGraph, n: int) -> bool:
    op = ir.op(g, n)
    return isinstance(op, HEAVY) and bool(op.axes)


def _innermost(g: DiGraph, stmt: int) -> int | None:
    """The first non-elementwise node of `stmt` (in topological order) that another one of
    `stmt` reads, directly or through its elementwise ops; None when there is none."""
    nodes = [n for n in ir.order(g) if g.nodes[n]["stmt"] == stmt]
    for n in nodes:
        if not _heavy(g, n):
            continue
        seen, todo = set(), list(g.successors(n))
        while todo:
            v = todo.pop()
            if v in seen or g.nodes[v]["stmt"] != stmt:
                continue
            if _heavy(g, v):
                return n
            seen.add(v)
            todo.extend(g.successors(v))
    return None


def _sibling_product(g: DiGraph, stmt: int) -> int | None:
    """The first of two or more products of `stmt` that no heavy op of it reads (siblings:
    `silu(X * Wg) * (X * Wu)`), else None: a kernel on the tensor cores runs one matrix
    product (or an attention, a chain), so each gets a statement and fusion decides."""
    products = [n for n in ir.order(g) if g.nodes[n]["stmt"] == stmt and _heavy(g, n)
                and isinstance(ir.op(g, n), ir.Contract)]
    return products[0] if len(products) > 1 else None


def _key(g: DiGraph, n: int, stmt: int):
    """What `n` computes: its op and type, and its operands' (by node where they come from
    another statement)."""
    if g.nodes[n]["stmt"] != stmt:
        return n
    return (ir.op(g, n), ir.type_of(g, n), tuple(_key(g, u, stmt) for u in ir.operands(g, n)))


def _cut(g: DiGraph, inner: int, stmt: int, new: int) -> int:
    """Move `inner` to statement `new`, with copies of what it reads in `stmt` and the
    elementwise ops over its axes that read nothing else of `stmt`; the node the new
    statement's readers read (the last of those ops when they form a chain)."""
    g.nodes[inner]["stmt"] = new
    _own_copies(g, [inner], stmt, new)
    axes = set(ir.type_of(g, inner).axes)
    moved, tail = {inner}, []
    grew = True
    while grew:
        grew = False
        for n in sorted(moved):
            for v in sorted(g.successors(n)):
                if g.nodes[v]["stmt"] != stmt or not isinstance(ir.op(g, v), ir.Map) or \
                        set(ir.type_of(g, v).axes) != axes:
                    continue
                if all(u in moved or g.nodes[u]["stmt"] != stmt or is_free(g, u)
                       for u in ir.operands(g, v)):
                    g.nodes[v]["stmt"] = new
                    moved.add(v)
                    tail.append(v)
                    grew = True
    _own_copies(g, tail, stmt, new)
    read = [n for n in moved if any(g.nodes[v]["stmt"] != new for v in g.successors(n))]
    return read[0] if len(read) == 1 else inner


def _equation(g: DiGraph, outer: str, inner: int, root: int, stmt: int,
              taken: set) -> ir.EquationInfo:
    """The new statement's equation, named `<outer>:<expression>` (`#2`, `#3` ... after a
    name already taken)."""
    op = ir.op(g, inner)
    axes = tuple(op.axes)
    name, k = f"{outer}:{_expression(g, root, stmt, inner)}", 2
    while name in taken:
        name, k = f"{outer}:{_expression(g, root, stmt, inner)}#{k}", k + 1
    return ir.EquationInfo(
        name, ir.type_of(g, root).axes,
        axes if isinstance(op, ir.Contract) else (),
        axes if isinstance(op, ir.Reduce) else (),
        axes if isinstance(op, ir.Softmax) else (), (), root, g.nodes[inner]["span"], stmt)


def _expression(g: DiGraph, root: int, stmt: int, inner: int) -> str:
    """`gelu(contract[l])`: the new statement's ops from its inner one to what is read of
    it (operands from elsewhere as `_`, constants by value); past LONGEST characters, the
    inner op alone."""
    def show(n: int) -> str:
        op = ir.op(g, n)
        if isinstance(op, ir.Const):
            return f"{op.value:g}"
        if g.nodes[n]["stmt"] != stmt:
            return "_"
        if isinstance(op, HEAVY):
            return f"{getattr(op, 'fn', type(op).__name__.lower())}[{' '.join(op.axes)}]"
        if isinstance(op, ir.Map):
            return f"{op.fn}({', '.join(show(u) for u in ir.operands(g, n))})"
        return type(op).__name__.lower()
    text = show(root)
    return text if len(text) <= LONGEST else show(inner)
