"""Split reductions: a reduced axis grouped across blocks, its partial states merged after.

`x -> p_x splits x s_x` relabels a reduced axis `x` of size X as two axes: `p_x`
(P splits, static) and `s_x` (each split's share, ceil(X / P), derived from X at
run time), with x = p_x * size(s_x) + s_x. Every array that carries x before
its reductions is retyped to carry (p_x, s_x) in x's place; arrays enter the
split region through a gather at the clamped position (positions past X, in
the last splits, read row X - 1 and are masked out). Each reduction over x
becomes a partial reduction over s_x (the accumulator's state, per split) and
a merge over p_x, written as ordinary ops of the IR, so that fusion, the tile
search, the cost model, every backend and explain treat the partial kernel
and the merge kernel like any other:

    sum[x] e          -> sum[p_x](sum[s_x](where(valid, e, 0)))
    max / min         -> the same with -inf / +inf outside
    logsumexp[x] e    -> logsumexp[p_x](logsumexp[s_x](where(valid, e, -inf)))
    mean[x] e         -> the split sum / size(x)
    var[x] e          -> the split sum of squared deviations from the split mean / size(x)
    A B over x        -> sum[p_x](where(valid, A, 0) where(valid, B, 0) over s_x)
    softmax[x](S) V   -> O_p = softmax[s_x](S') V' and L_p = logsumexp[s_x](S') per split,
                         then softmax[p_x](L_p) O_p over p_x   (S' = where(valid, S, -inf);
                         L_p is stored broadcast over O's value axes, so the partial kernel
                         stores arrays of one shape and keeps those axes woven)

The merge of the softmax-contraction pair is the online softmax's merge of
(m, l, o) states in the form the language already has: a split whose keys
are all masked has L_p = -inf and O_p = 0, so it weighs nothing, and a row
masked everywhere gives 0, as the reference does. Each statement holding a
reduction over x is cut in two: the partial side becomes a new statement
(`O.part`), the merge and what follows it stay in the original one, so the
merge is always its own kernel's work. Readers of x that are not reductions (an output
keeping x, the normalising pass of a norm) go on reading the original arrays;
a standalone softmax over x is first written as exp(S - logsumexp[x](S)) so its
statistics split. An axis that is scanned, moved by a view, normalised by a
softmax over several axes before its reduction, or reduced by a reduction that
reads another reduction over it (`sum[x](X - mean[x](X))`) is not split
(`splittable` says why).

`split(g, axis, parts)` is a pure function: it returns a new graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..diagrams.diagnostics import NapkinError, error
from . import ir
from .canonical import dead_code, through

MERGEABLE = ("sum", "max", "min", "logsumexp", "mean", "var")
_FILL = {"sum": 0.0, "mean": 0.0, "var": 0.0, "max": -np.inf, "logsumexp": -np.inf,
         "min": np.inf}


@dataclass(frozen=True)
class SplitInfo:
    """The split recorded on the graph (``g.graph["split"]``), for explain and draw."""
    axis: str          # x
    parts: int         # P
    part_axis: str     # p_x
    share_axis: str    # s_x
    partials: tuple[str, ...]     # the partial-state arrays (O.part, O.lse, ...)
    apart: tuple[tuple[int, int], ...] = ()   # (partial statement, its merge's): never fused
    windows: tuple[int, ...] = ()    # the gathers through which arrays enter the split: each
                                     # reads its base at p_x * size(s_x) + s_x (clamped), a
                                     # window of rows a lowering may copy as a tile instead


class NotSplittable(Exception):
    """Why an axis cannot be split (a reason for explain and for N0607)."""


def split_axes(g: nx.DiGraph, axis: str) -> tuple[str, str]:
    """Fresh names for the two axes of a split of `axis` (`p_x`, `s_x`)."""
    taken = set(g.graph["axes"]) | set(g.graph["arrays"])
    names = []
    for stem in ("p", "s"):
        name, k = f"{stem}_{axis}", 2
        while name in taken:
            name, k = f"{stem}_{axis}{k}", k + 1
        taken.add(name)
        names.append(name)
    return names[0], names[1]


def share(size: int, parts: int) -> int:
    """Positions per split: ceil(size / parts)."""
    return -(-int(size) // int(parts))


def complete_sizes(g: nx.DiGraph, sizes: dict) -> dict:
    """`sizes` with every axis of `g` the diagram itself does not size (a split's p_x and
    s_x): the one place derived sizes are computed (run time and planning alike)."""
    out = dict(sizes)
    for name, info in g.graph["axes"].items():
        if name in out:
            continue
        if info.derived is not None:
            source, parts = info.derived
            out[name] = share(out[source], parts)
        elif info.size is not None:
            out[name] = info.size
    return out


def splittable(g: nx.DiGraph, axis: str) -> str | None:
    """None when `axis` can be split, else why not."""
    try:
        _Region(_normalisations(g.copy(), axis), axis)
    except NotSplittable as exc:
        return str(exc)
    return None


def split(g: nx.DiGraph, axis: str, parts: int) -> nx.DiGraph:
    """The graph with reduced axis `axis` split in `parts` (see the module docstring)."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise NotSplittable(f"a split count is a whole number of at least 1, not {parts!r}")
    g = _normalisations(g.copy(), axis)
    return _Rewrite(g, _Region(g, axis), int(parts)).run()


def _normalisations(g: nx.DiGraph, axis: str) -> nx.DiGraph:
    """A softmax over `axis` alone that no contraction over `axis` takes (a standalone softmax,
    whose output keeps the axis) becomes where(L == -inf, 0, exp(S - L)) with
    L = logsumexp[axis](S): the statistics are then a reduction that splits, and the
    normalisation a pass over the whole rows: exp(S - L), with L taken as +inf where a row
    is masked everywhere (it gives 0, as the reference's softmax does)."""
    for n in ir.order(g):
        op = ir.op(g, n)
        if not (isinstance(op, ir.Softmax) and op.axes == (axis,)):
            continue
        users = _users_through_assign(g, n)
        if any(isinstance(ir.op(g, v), ir.Contract) and ir.op(g, v).axes == (axis,)
               for v in users):
            continue
        t, stmt, span = ir.type_of(g, n), g.nodes[n]["stmt"], g.nodes[n]["span"]
        scores = ir.operands(g, n)[0]
        st = ir.type_of(g, scores)
        f = ir.INTERMEDIATE

        def add(op_, axes, dtype, args):
            return ir.add_node(g, op_, ir.ArrayType(tuple(axes), dtype), args, span=span,
                               stmt=stmt)
        rows = tuple(a for a in st.axes if a != axis)
        lse = add(ir.Reduce("logsumexp", (axis,)), rows, f, [scores])
        neg, pos = add(ir.Const(-np.inf), (), f, []), add(ir.Const(np.inf), (), f, [])
        empty = add(ir.Map("eq"), rows, "bool", [lse, neg])
        shift = add(ir.Map("where"), rows, f, [empty, pos, lse])     # exp(S - inf) = 0
        shifted = add(ir.Map("sub"), st.axes, f, [scores, shift])
        out = add(ir.Map("exp"), st.axes, f, [shifted])
        _redirect(g, n, out)
    return g


def _redirect(g: nx.DiGraph, n: int, result: int) -> None:
    """Every reader of n reads `result` instead."""
    for v in list(g.successors(n)):
        ports = g.edges[n, v]["ports"]
        g.remove_edge(n, v)
        if g.has_edge(result, v):
            g.edges[result, v]["ports"] = g.edges[result, v]["ports"] + ports
        else:
            g.add_edge(result, v, array=ir.type_of(g, result), ports=ports)
    for name, m in list(g.graph["arrays"].items()):
        if m == n:
            g.graph["arrays"] = {**g.graph["arrays"], name: result}


class _Region:
    """The reductions over `axis` that merge (sinks), and the nodes carrying `axis` that
    feed them (the region, rebuilt over the split axes). Other readers of those nodes (an
    output keeping `axis`, a normalisation pass) go on reading the originals."""

    def __init__(self, g: nx.DiGraph, axis: str):
        self.g, self.axis = g, axis
        if axis not in g.graph["axes"]:
            raise NotSplittable(f"the diagram has no axis `{axis}`")
        carries = {n for n in g if axis in ir.type_of(g, n).axes}
        self.sinks = [n for n in ir.order(g) if n not in carries and _merges_over(g, n, axis)
                      and any(u in carries for u in ir.operands(g, n))]
        if not self.sinks:
            raise NotSplittable(f"no reduction over `{axis}` merges partial states")
        for n in self.sinks:
            if any(m in self.sinks for m in nx.ancestors(g, n)):
                raise NotSplittable(f"a reduction over `{axis}` reads another one's result "
                                    "(its partial states would wait for the other's merge)")
        inside: set[int] = set()
        stack = [u for n in self.sinks for u in ir.operands(g, n) if u in carries]
        while stack:
            u = stack.pop()
            if u in inside:
                continue
            inside.add(u)
            stack.extend(v for v in ir.operands(g, u) if v in carries)
        self.nodes = [n for n in ir.order(g) if n in inside]
        for n in self.nodes:
            op = ir.op(g, n)
            if isinstance(op, ir.Scan) and axis in op.axes:
                raise NotSplittable(f"`{axis}` is scanned before it is reduced (a prefix "
                                    "crosses the splits)")
            if isinstance(op, ir.Softmax) and axis in op.axes:
                self._pair_only(n, inside)
            if isinstance(op, (ir.View, ir.Gather)):
                self._keeps(n, inside)

    def _pair_only(self, n: int, inside: set) -> None:
        g, axis = self.g, self.axis
        if ir.op(g, n).axes != (axis,):
            raise NotSplittable(f"softmax over {' '.join(ir.op(g, n).axes)} before a reduction "
                                f"(a split normalises over `{axis}` alone)")
        for v in _users_through_assign(g, n):
            op = ir.op(g, v)
            if v in inside or v in self.sinks:
                if not (isinstance(op, ir.Contract) and op.axes == (axis,)):
                    raise NotSplittable(f"softmax[{axis}] reaches a reduction other than one "
                                        f"contraction over `{axis}`")

    def _keeps(self, n: int, inside: set) -> None:
        """A view or gather of an array carrying the axis reads it along the axis itself."""
        g, axis = self.g, self.axis
        base = ir.operands(g, n)[0]
        base_axes = ir.type_of(g, base).axes
        labels = ir.op(g, n).labels
        if base in inside:
            k = base_axes.index(axis)
            if labels[k] != axis or list(labels).count(axis) != 1:
                raise NotSplittable(f"`{axis}` is read at other positions (a view or gather "
                                    "moves it)")
        elif axis in labels and any(u in inside for u in ir.operands(g, n)):
            raise NotSplittable(f"a gather reads `{axis}` from another axis")


def _merges_over(g, n: int, axis: str) -> bool:
    op = ir.op(g, n)
    if isinstance(op, ir.Reduce):
        return axis in op.axes and op.fn in MERGEABLE
    return isinstance(op, ir.Contract) and axis in op.axes


def _users_through_assign(g, n):
    out = []
    for v in g.successors(n):
        if isinstance(ir.op(g, v), ir.Assign) and through(g, v) == n:
            out.extend(_users_through_assign(g, v))
        else:
            out.append(v)
    return out


class _Rewrite:
    def __init__(self, g: nx.DiGraph, region: _Region, parts: int):
        self.g, self.r, self.parts = g, region, parts
        self.x = region.axis
        self.p, self.s = split_axes(g, self.x)
        self.inside = set(region.nodes)
        self.primed: dict[int, int] = {}
        self.gathers: dict[tuple[int, int | None], int] = {}
        self.partials: list[str] = []
        self.part_stmt: dict[int, int] = {}

    # -- types and small builders ----------------------------------------------------------
    def retype(self, t: ir.ArrayType) -> ir.ArrayType:
        axes: list[str] = []
        for a in t.axes:
            axes.extend((self.p, self.s) if a == self.x else (a,))
        return ir.ArrayType(tuple(axes), t.dtype)

    def add(self, op, out: ir.ArrayType, args, stmt, span=None) -> int:
        return ir.add_node(self.g, op, out, args, span=span, stmt=stmt)

    def map(self, fn: str, args, dtype: str, stmt) -> int:
        axes = tuple(dict.fromkeys(a for u in args for a in ir.type_of(self.g, u).axes))
        return self.add(ir.Map(fn), ir.ArrayType(axes, dtype), args, stmt)

    def const(self, value, dtype: str, stmt) -> int:
        return self.add(ir.Const(value), ir.ArrayType((), dtype), [], stmt)

    def size(self, axis: str, stmt) -> int:
        return self.add(ir.SizeOf(axis), ir.ArrayType((), ir.INT_INTERMEDIATE), [], stmt)

    def position(self, stmt) -> int:
        """x = p_x * size(s_x) + s_x, over [p_x s_x]."""
        i = ir.INT_INTERMEDIATE
        p = self.add(ir.Index(self.p), ir.ArrayType((self.p,), "index"), [], stmt)
        s = self.add(ir.Index(self.s), ir.ArrayType((self.s,), "index"), [], stmt)
        return self.map("add", [self.map("mul", [p, self.size(self.s, stmt)], i, stmt), s],
                        i, stmt)

    def valid(self, stmt) -> int:
        return self.map("lt", [self.position(stmt), self.size(self.x, stmt)], "bool", stmt)

    def clamped(self, stmt) -> int:
        i = ir.INT_INTERMEDIATE
        last = self.map("sub", [self.size(self.x, stmt), self.const(1, i, stmt)], i, stmt)
        low = self.map("minimum", [self.position(stmt), last], i, stmt)
        return self.map("maximum", [low, self.const(0, i, stmt)], i, stmt)

    def masked(self, n: int, fill: float, stmt) -> int:
        """where(valid, n, fill): positions past the axis (the clamped reads) count as `fill`.
        Integers keep their kind (an infinite fill turns them to floats first)."""
        t = ir.type_of(self.g, n)
        kind = ir.kind_of_dtype(t.dtype)
        if kind != "float" and np.isinf(fill):
            n = self.map("float", [n], ir.INTERMEDIATE, stmt)
            kind = "float"
        dtype = ir.INTERMEDIATE if kind == "float" else ir.INT_INTERMEDIATE
        return self.map("where", [self.valid(stmt), n, self.const(fill, dtype, stmt)], dtype,
                        stmt)

    def assign(self, name: str, n: int, axes, stmt) -> int:
        t = ir.type_of(self.g, n)
        node = self.add(ir.Assign(name), ir.ArrayType(tuple(axes), t.dtype), [n], stmt)
        self.g.graph["arrays"] = {**self.g.graph["arrays"], name: node}
        self.partials.append(name)
        return node

    def fresh(self, name: str) -> str:
        taken = set(self.g.graph["arrays"]) | set(self.g.graph["axes"])
        out, k = name, 2
        while out in taken:
            out, k = f"{name}{k}", k + 1
        return out

    # -- the rewrite ------------------------------------------------------------------------
    def run(self) -> nx.DiGraph:
        g = self.g
        self._statements()
        for n in self.r.nodes:
            self.primed[n] = self._prime(n)
        for n in self.r.sinks:
            self._sink(n)
        g.graph["axes"] = {**g.graph["axes"],
                           self.p: ir.Axis(self.p, self.parts, self.p, None),
                           self.s: _share_axis(g, self.s, self.x, self.parts)}
        g = dead_code(g)
        g.graph["split"] = SplitInfo(self.x, self.parts, self.p, self.s, tuple(self.partials),
                                     tuple((part, merge) for merge, part in self.part_stmt.items()),
                                     tuple(sorted(n for n in self.gathers.values() if n in g)))
        return g

    def _statements(self) -> None:
        """Each statement holding a reduction over x gets a partial statement: what in it
        feeds the partial side moves there (the merge and what follows stay)."""
        g = self.g
        eqs = list(g.graph["equations"])
        by_stmt = {e.stmt: e for e in eqs}
        nxt = max([e.stmt for e in eqs] + [d["stmt"] for _, d in g.nodes(data=True)
                                           if d["stmt"] is not None] + [-1]) + 1
        for n in self.r.sinks:
            stmt = g.nodes[n]["stmt"]
            if stmt in self.part_stmt:
                continue
            self.part_stmt[stmt] = nxt
            info = by_stmt.get(stmt)
            if info is not None:
                eqs.append(ir.EquationInfo(f"{info.name}.part", info.axes, info.contracted,
                                           info.reduced, info.normalised, info.broadcast,
                                           info.node, info.span, nxt))
            nxt += 1
        g.graph["equations"] = tuple(eqs)
        sinks_of = {}
        for n in self.r.sinks:
            sinks_of.setdefault(g.nodes[n]["stmt"], []).append(n)
        for stmt, part in self.part_stmt.items():
            feeding = set()
            for n in sinks_of[stmt]:
                feeding |= nx.ancestors(g, n)
            for u in feeding:
                if g.nodes[u]["stmt"] == stmt:
                    g.nodes[u]["stmt"] = part

    def _entry(self, n: int, stmt) -> int:
        """An array entering the region: read at the clamped split position (one gather per
        reading statement, so that no kernel stores a copy)."""
        key = (n, stmt)
        if key not in self.gathers:
            t = ir.type_of(self.g, n)
            labels = tuple(None if a == self.x else a for a in t.axes)
            self.gathers[key] = self.add(ir.Gather(labels), self.retype(t),
                                         [n, self.clamped(stmt)], stmt,
                                         span=self.g.nodes[n]["span"])
        return self.gathers[key]

    def _prime(self, n: int) -> int:
        """n rebuilt over the split axes; every type follows its new operands by the IR's
        rules (a mask puts (p_x, s_x) first), views and gathers relabel by axis name."""
        g, op = self.g, ir.op(self.g, n)
        stmt = g.nodes[n]["stmt"]
        if isinstance(op, ir.Index):
            return self.position(stmt)
        args = ir.operands(g, n)
        if not any(u in self.inside for u in args):
            return -1 - n                       # an entry: gathered where read (`_read`)
        broadcasts = isinstance(op, ir.Assign) and \
            set(ir.type_of(g, n).axes) != set(ir.type_of(g, args[0]).axes)
        if isinstance(op, ir.Assign) and not broadcasts:
            # a name inside the region is its value: no statement stores a split copy of a
            # named array (its own statement may have no reduction to fuse with, and then
            # has to store the array whole and split at once, which no tiling holds)
            return self.primed[args[0]]
        new_args = [self._read(u, stmt) for u in args]
        new_types = [ir.type_of(g, u) for u in new_args]
        t = ir.type_of(g, n)
        union = tuple(dict.fromkeys(a for nt in new_types for a in nt.axes))
        if isinstance(op, (ir.View, ir.Gather)) and args[0] in self.inside:
            old = dict(zip(ir.type_of(g, args[0]).axes, op.labels))
            labels = tuple(a if a in (self.p, self.s) else old[a] for a in new_types[0].axes)
            op = type(op)(labels)
        if isinstance(op, ir.View):
            axes = tuple(dict.fromkeys(op.labels))
        elif isinstance(op, ir.Gather):
            axes = ir.gather_axes(op.labels, [nt.axes for nt in new_types[1:]])
        elif isinstance(op, ir.Softmax) and self.x in op.axes:
            new_args = [self.masked(new_args[0], -np.inf, stmt)]
            op = ir.Softmax((self.s,))
            axes = ir.type_of(g, new_args[0]).axes
        elif isinstance(op, ir.Contract):
            axes = tuple(a for a in union if a not in op.axes)
        elif isinstance(op, ir.Reduce):
            axes = tuple(a for a in new_types[0].axes if a not in op.axes)
        elif broadcasts:                         # a name that adds axes: its layout, kept
            axes = self.retype(ir.type_of(g, n)).axes
        else:                                    # maps, scans, softmax over other axes,
            axes = union                         # pass-through names
        return self.add(op, ir.ArrayType(axes, t.dtype), new_args, stmt, span=g.nodes[n]["span"])

    def _read(self, u: int, stmt) -> int:
        if u not in self.inside:
            return u
        v = self.primed[u]
        return self._entry(-1 - v, stmt) if v < 0 else v     # an entry (or a name of one)

    def _sink(self, n: int) -> None:
        g, op = self.g, ir.op(self.g, n)
        merge_stmt = g.nodes[n]["stmt"]          # the sink stays; what feeds it moved
        part = self.part_stmt[merge_stmt]
        name = _equation_name(g, merge_stmt) or "partial"
        t = ir.type_of(g, n)
        if isinstance(op, ir.Reduce):
            result = self._reduce(n, op, t, part, merge_stmt, name)
        elif self._pair_operand(n) is not None:
            result = self._pair(n, op, t, part, merge_stmt, name)
        else:
            a, b = (self.masked(self._read(u, part), 0.0, part) for u in ir.operands(g, n))
            axes = tuple(self.s if ax == self.x else ax for ax in op.axes)
            union = tuple(dict.fromkeys(ir.type_of(g, a).axes + ir.type_of(g, b).axes))
            c = self.add(ir.Contract(axes), ir.ArrayType(
                tuple(ax for ax in union if ax not in axes), t.dtype), [a, b], part)
            result = self._merge("sum", self._store(c, f"{name}.part", part), t.dtype, merge_stmt)
            if ir.type_of(g, result).axes != t.axes:
                result = self.add(ir.Assign(self.fresh(f"{name}.merged")), t, [result], merge_stmt)
        _redirect(g, n, result)

    def _pair_operand(self, n: int):
        g = self.g
        for k, u in enumerate(ir.operands(g, n)):
            if isinstance(ir.op(g, through(g, u)), ir.Softmax):
                return k
        return None

    def _reduce(self, n, op, t, part, merge_stmt, name) -> int:
        g = self.g
        src = self._read(ir.operands(g, n)[0], part)
        axes = tuple(self.s if a == self.x else a for a in op.axes)
        if op.fn == "var":
            return self._variance(src, op, axes, t, part, merge_stmt, name)
        if op.fn in ("max", "min") and ir.kind_of_dtype(ir.type_of(g, src).dtype) != "float":
            partial = self._partial(src, op.fn, axes, t.dtype, part)  # clamped reads repeat a
        else:                                                         # real position: harmless
            fn = "sum" if op.fn == "mean" else op.fn
            partial = self._partial(self.masked(src, _FILL[op.fn], part), fn, axes, t.dtype, part)
        stored = self._store(partial, f"{name}.part", part)
        fn = "sum" if op.fn == "mean" else op.fn
        total = self._merge(fn, stored, t.dtype, merge_stmt)
        if op.fn == "mean":
            return self.map("div", [total, self._count(op.axes, merge_stmt)], t.dtype, merge_stmt)
        return total

    def _partial(self, src: int, fn: str, axes, dtype: str, stmt) -> int:
        kept = tuple(a for a in ir.type_of(self.g, src).axes if a not in axes)
        return self.add(ir.Reduce(fn, axes), ir.ArrayType(kept, dtype), [src], stmt)

    def _store(self, n: int, name: str, stmt) -> int:
        """A partial state as a named array, splits first."""
        rest = tuple(a for a in ir.type_of(self.g, n).axes if a != self.p)
        return self.assign(self.fresh(name), n, (self.p,) + rest, stmt)

    def _merge(self, fn: str, stored: int, dtype: str, stmt) -> int:
        rest = tuple(a for a in ir.type_of(self.g, stored).axes if a != self.p)
        return self.add(ir.Reduce(fn, (self.p,)), ir.ArrayType(rest, dtype), [stored], stmt)

    def _variance(self, src, op, axes, t, part, merge_stmt, name) -> int:
        """Per split: its count n_p (from the indices), mean_p and M2_p (two passes over s_x);
        merged by Chan's rule: mean = sum n_p mean_p / N, M2 = sum M2_p + n_p (mean_p - mean)^2."""
        f = t.dtype
        n_p = self._split_count(op.axes, part)
        total = self._partial(self.masked(src, 0.0, part), "sum", axes, f, part)
        positive = self.map("gt", [n_p, self.const(0.0, f, part)], "bool", part)
        safe = self.map("maximum", [n_p, self.const(1.0, f, part)], f, part)
        mean_p = self.map("where", [positive, self.map("div", [total, safe], f, part),
                                    self.const(0.0, f, part)], f, part)
        dev = self.map("sub", [src, mean_p], f, part)
        m2_p = self._partial(self.masked(self.map("mul", [dev, dev], f, part), 0.0, part), "sum",
                             axes, f, part)
        mean_s = self._store(mean_p, f"{name}.mean", part)
        m2_s = self._store(m2_p, f"{name}.m2", part)
        m = merge_stmt
        n_m = self._split_count(op.axes, m)
        count = self._count(op.axes, m)
        mean = self.map("div", [self._merge("sum", self.map("mul", [n_m, mean_s], f, m), f, m),
                                count], f, m)
        shift = self.map("sub", [mean_s, mean], f, m)
        spread = self.map("mul", [n_m, self.map("mul", [shift, shift], f, m)], f, m)
        m2 = self.map("add", [self._merge("sum", m2_s, f, m), self._merge("sum", spread, f, m)],
                      f, m)
        return self.map("div", [m2, count], f, m)

    def _split_count(self, axes, stmt) -> int:
        """Positions of split p_x that lie inside x (times the other reduced axes), as a float
        over [p_x]: clamp(size(x) - p_x * size(s_x), 0, size(s_x))."""
        i = ir.INT_INTERMEDIATE
        p = self.add(ir.Index(self.p), ir.ArrayType((self.p,), "index"), [], stmt)
        start = self.map("mul", [p, self.size(self.s, stmt)], i, stmt)
        left = self.map("sub", [self.size(self.x, stmt), start], i, stmt)
        n = self.map("maximum", [self.map("minimum", [left, self.size(self.s, stmt)], i, stmt),
                                 self.const(0, i, stmt)], i, stmt)
        for a in axes:
            if a != self.x:
                n = self.map("mul", [n, self.size(a, stmt)], i, stmt)
        return self.map("float", [n], ir.INTERMEDIATE, stmt)

    def _count(self, axes, stmt) -> int:
        """The number of positions a mean or variance divides by (the original axes)."""
        sizes = [self.size(a, stmt) for a in axes]
        out = sizes[0]
        for s in sizes[1:]:
            out = self.map("mul", [out, s], ir.INT_INTERMEDIATE, stmt)
        return self.map("float", [out], ir.INTERMEDIATE, stmt)

    def _pair(self, n, op, t, part, merge_stmt, name) -> int:
        """softmax[x](S) V: partial O_p and L_p, merged as softmax[p_x](L_p) O_p."""
        g = self.g
        args = ir.operands(g, n)
        k = self._pair_operand(n)
        probs = self._read(args[k], part)
        other = self.masked(self._read(args[1 - k], part), 0.0, part)
        soft = through(g, probs)
        scores = ir.operands(g, soft)[0]          # where(valid, S', -inf), built by _prime
        pair = [probs, other] if k == 0 else [other, probs]
        union = tuple(dict.fromkeys(ir.type_of(g, pair[0]).axes + ir.type_of(g, pair[1]).axes))
        o = self.add(ir.Contract((self.s,)), ir.ArrayType(
            tuple(a for a in union if a != self.s), t.dtype), pair, part)
        o_axes = (self.p,) + t.axes
        o_part = self.assign(self.fresh(f"{name}.part"), o, o_axes, part)
        lse = self.add(ir.Reduce("logsumexp", (self.s,)), ir.ArrayType(
            tuple(a for a in ir.type_of(g, scores).axes if a != self.s), t.dtype), [scores], part)
        # stored over O's axes (broadcast along the value axes), so that the partial kernel
        # stores arrays of one shape: its value axes stay woven (tiled across threads)
        l_part = self.assign(self.fresh(f"{name}.lse"), lse, o_axes, part)
        w = self.add(ir.Softmax((self.p,)), ir.type_of(g, l_part), [l_part], merge_stmt)
        union = tuple(dict.fromkeys(ir.type_of(g, w).axes + o_axes))
        merged = self.add(ir.Contract((self.p,)), ir.ArrayType(
            tuple(a for a in union if a != self.p), t.dtype), [w, o_part], merge_stmt)
        if ir.type_of(g, merged).axes != t.axes:
            merged = self.add(ir.Assign(self.fresh(f"{name}.merged")), t, [merged], merge_stmt)
        return merged


def _share_axis(g, name: str, source: str, parts: int) -> ir.Axis:
    info = g.graph["axes"][source]
    size = share(info.size, parts) if info.size is not None else None
    return ir.Axis(name, size, name, None, derived=None if size is not None else (source, parts))


def _equation_name(g, stmt) -> str | None:
    return next((e.name for e in g.graph["equations"] if e.stmt == stmt), None)


def refuse(axis: str, why: str, span=None) -> NapkinError:
    return error("N0607", f"cannot split `{axis}`: {why}", span,
                 help="split an axis that a sum, max, min, mean, logsumexp, variance or "
                      "contraction reduces (a softmax over it: only when contracted over it); "
                      "or drop the hint and let the planner choose")


def window(g: nx.DiGraph, n: int):
    """(base node, split) when n is a split's window gather (SplitInfo.windows), else None."""
    info = g.graph.get("split")
    if info is None or n not in info.windows:
        return None
    return ir.operands(g, n)[0], info


def unmasked(g: nx.DiGraph, n: int) -> int:
    """The window under a `where(valid, window, 0)` mask (a lowering that zero-fills the rows
    past the axis needs no mask), else n."""
    op = ir.op(g, n)
    if isinstance(op, ir.Map) and op.fn == "where":
        cond, value, fill = ir.operands(g, n)
        from .kernels import is_free
        if is_free(g, cond) and isinstance(ir.op(g, fill), ir.Const) and \
                ir.op(g, fill).value == 0 and window(g, value) is not None:
            return value
    return n


__all__ = ["split", "splittable", "window", "unmasked", "complete_sizes", "share", "SplitInfo", "NotSplittable",
           "refuse", "MERGEABLE"]
