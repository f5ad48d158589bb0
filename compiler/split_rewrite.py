"""The rewrite of a split (compiler/split.py's docstring gives the rules): every node of the
region rebuilt over (p_x, s_x), arrays entering through clamped gathers, each reduction over
x a partial over s_x stored per split and a merge over p_x, each statement holding one cut
in a partial and a merge statement."""

from __future__ import annotations

from dataclasses import dataclass

from .graph import DiGraph, ancestors
import numpy as np

from . import ir
from .canonical import dead_code, through
from .split_region import Region, redirect
from .split_statements import separate_copies

_FILL = {"sum": 0.0, "mean": 0.0, "var": 0.0, "max": -np.inf, "logsumexp": -np.inf,
         "min": np.inf}

INT_FILL = float(2 ** 62)    # beyond any position or i32 value; exact in f64 and i64


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


def split_axes(g: DiGraph, axis: str) -> tuple[str, str]:
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


class Rewrite:
    def __init__(self, g: DiGraph, region: Region, parts: int):
        self.g, self.r, self.parts = g, region, parts
        self.x = region.axis
        self.p, self.s = split_axes(g, self.x)
        self.inside = set(region.nodes)
        self.primed: dict[int, int] = {}
        self.gathers: dict[tuple[int, int | None], int] = {}
        self.partials: list[str] = []
        self.part_stmt: dict[int, int] = {}
        # the nodes a gather's computed positions are made of: x read there is clamped into
        # the axis (the rows past it, in the last splits, are masked out; unclamped, a
        # position such as `size(i) - 1 - x` would read outside its array on the CPU
        # backends), elsewhere it is p_x * size(s_x) + s_x (the chunk-skip masks read it)
        self.in_positions = set()
        for n in region.nodes:
            if isinstance(ir.op(g, n), ir.Gather):
                for m in ir.operands(g, n)[1:]:
                    self.in_positions |= ancestors(g, m) | {m}

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
    def run(self) -> DiGraph:
        g = self.g
        before = set(g.nodes)
        self._statements()
        for n in self.r.nodes:
            self.primed[n] = self._prime(n)
        for n in self.r.sinks:
            self._sink(n)
        g.graph["axes"] = {**g.graph["axes"],
                           self.p: ir.Axis(self.p, self.parts, self.p, None),
                           self.s: _share_axis(g, self.s, self.x, self.parts)}
        g = dead_code(g)
        if separate_copies(g, before, set(self.part_stmt), set(self.part_stmt.values())):
            g = dead_code(g)        # what only the moved copy read is computed there now
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
                feeding |= ancestors(g, n)
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
            return self.clamped(stmt) if n in self.in_positions else self.position(stmt)
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
        redirect(g, n, result)

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
        if op.fn in ("argmax", "argmin"):
            return self._arg(src, op, axes, t, part, merge_stmt, name)
        if op.fn in ("max", "min") and ir.kind_of_dtype(ir.type_of(g, src).dtype) != "float":
            # past the axis, a clamped read repeats a real position, but an index of the axis
            # does not (`max[j](j)`: 98 for j < 97 in parts of 33): those positions take a
            # value below (max) or above (min) any real one
            fill = -INT_FILL if op.fn == "max" else INT_FILL
            partial = self._partial(self.masked(src, fill, part), op.fn, axes, t.dtype, part)
        else:
            fn = "sum" if op.fn == "mean" else op.fn
            partial = self._partial(self.masked(src, _FILL[op.fn], part), fn, axes, t.dtype, part)
        stored = self._store(partial, f"{name}.part", part)
        fn = "sum" if op.fn == "mean" else op.fn
        total = self._merge(fn, stored, t.dtype, merge_stmt)
        if op.fn == "mean":
            return self.map("div", [total, self._count(op.axes, merge_stmt)], t.dtype, merge_stmt)
        return total

    def _arg(self, src, op, axes, t, part, merge_stmt, name) -> int:
        """argmax (argmin): per split its best value and the position of its first (a NaN
        beats every number, as in the accumulator); merged by the first split holding the
        best value (argmax[p] of the values), whose position is read there. Ties keep the
        smallest position: within a split by argmax's own rule, across splits because an
        earlier split holds smaller positions; positions past the axis hold a value below
        (above) any real one, so an empty split is never taken."""
        g = self.g
        best = "max" if op.fn == "argmax" else "min"
        integer = ir.kind_of_dtype(ir.type_of(g, src).dtype) != "float"
        fill = (-INT_FILL if best == "max" else INT_FILL) if integer else _FILL[best]
        vals = self.masked(src, fill, part)
        value_t = ir.type_of(g, vals).dtype
        value = self._store(self._partial(vals, best, axes, value_t, part), f"{name}.part", part)
        first = self._partial(vals, op.fn, axes, t.dtype, part)
        i = ir.INT_INTERMEDIATE
        p = self.add(ir.Index(self.p), ir.ArrayType((self.p,), "index"), [], part)
        offset = self.map("mul", [p, self.size(self.s, part)], i, part)
        where = self._store(self.map("add", [first, offset], t.dtype, part), f"{name}.at", part)
        chosen = self.add(ir.Reduce(op.fn, (self.p,)),
                          ir.ArrayType(tuple(a for a in ir.type_of(g, value).axes
                                             if a != self.p), t.dtype), [value], merge_stmt)
        labels = tuple(None if a == self.p else a for a in ir.type_of(g, where).axes)
        return self.add(ir.Gather(labels), ir.ArrayType(ir.gather_axes(
            labels, [ir.type_of(g, chosen).axes]), t.dtype), [where, chosen], merge_stmt)

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
