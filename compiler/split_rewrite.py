"""The rewrite of a split (compiler/split.py's docstring gives the rules): every node of the
region rebuilt over (p_x, s_x), arrays entering through clamped gathers, each reduction over
x a partial over s_x stored per split and a merge over p_x, each statement holding one cut
in a partial and a merge statement."""

from __future__ import annotations

from .graph import DiGraph, ancestors
import numpy as np

from . import ir
from .canonical import dead_code
from .split_region import Region, redirect
from .split_merges import Merges, equation_name
from .split_statements import separate_copies
from .split_info import SplitInfo, infos

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


class Rewrite(Merges):
    def __init__(self, g: DiGraph, region: Region, parts: int, within=None):
        self.g, self.r, self.parts, self.within = g, region, parts, within
        self.x = region.axis
        self.p, self.s = split_axes(g, self.x)
        self.inside = set(region.nodes)
        self.primed: dict[int, int] = {}
        self.gathers: dict[tuple[int, int | None], int] = {}
        self.partials: list[str] = []
        self.part_stmt: dict[int, int] = {}
        self.states: dict[int, tuple[int, int]] = {}     # (Merges._pair_state)
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
        joined = self._state_merges()
        for n in self.r.sinks:
            self._sink(n, joined.get(n))
        g.graph["axes"] = {**g.graph["axes"],
                           self.p: ir.Axis(self.p, self.parts, self.p, None),
                           self.s: _share_axis(g, self.s, self.x, self.parts)}
        g = dead_code(g)
        if separate_copies(g, before, set(self.part_stmt), set(self.part_stmt.values()), self.x):
            g = dead_code(g)        # what only the moved copy read is computed there now
        g.graph["split"] = SplitInfo(self.x, self.parts, self.p, self.s, tuple(self.partials),
                                     tuple((part, merge) for merge, part in self.part_stmt.items()),
                                     tuple(sorted(n for n in self.gathers.values() if n in g)),
                                     self.within)
        # every split of the graph, in the order made (kernel_split.py splits several kernels
        # of a plan, each over its own axis); "split" is the latest
        g.graph["splits"] = infos(g) + (g.graph["split"],)
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
        if isinstance(op, ir.Gather) and new_args[0] in self.gathers.values():
            return self._composed(n, op, new_args, stmt)
        if isinstance(op, (ir.View, ir.Gather)) and args[0] in self.inside:
            old_axes = ir.type_of(g, args[0]).axes
            old = dict(zip(old_axes, op.labels))
            labels = tuple(a if a in (self.p, self.s) else old[a] for a in new_types[0].axes)
            if isinstance(op, ir.Gather):   # the positions follow their axes' new order
                at = dict(zip([a for a in old_axes if old[a] is None], new_args[1:]))
                new_args = [new_args[0]] + [at[a] for a, lab in zip(new_types[0].axes, labels)
                                            if lab is None]
                new_types = [ir.type_of(g, u) for u in new_args]
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

    def _composed(self, n: int, op: ir.Gather, new_args, stmt) -> int:
        """A gather reading an entry's window (`_entry`: the array at the clamped split
        position) as one gather of the array itself, the clamped position its index along x:
        the kernel then reads the elements the gather picks, not the whole window (a paged
        cache's pages gathered from the window of their head axis held every page)."""
        g = self.g
        window = new_args[0]
        source, clamped = ir.operands(g, window)
        old = dict(zip(ir.type_of(g, ir.operands(g, n)[0]).axes, op.labels))
        indices = iter(new_args[1:])
        labels, operands = [], [source]
        for a in ir.type_of(g, source).axes:
            if a == self.x:
                labels.append(None)
                operands.append(clamped)
            else:
                labels.append(old[a])
                if old[a] is None:
                    operands.append(next(indices))
        axes = ir.gather_axes(labels, [ir.type_of(g, u).axes for u in operands[1:]])
        return self.add(ir.Gather(tuple(labels)), ir.ArrayType(axes, ir.type_of(g, n).dtype),
                        operands, stmt, span=g.nodes[n]["span"])

    def _read(self, u: int, stmt) -> int:
        if u not in self.inside:
            return u
        v = self.primed[u]
        return self._entry(-1 - v, stmt) if v < 0 else v     # an entry (or a name of one)

    def _sink(self, n: int, joined: int | None = None) -> None:
        """Rewrite sink n as its partial and its merge, in its statement's merge statement
        or in `joined` (Merges._state_merges)."""
        g, op = self.g, ir.op(self.g, n)
        own = g.nodes[n]["stmt"]          # the sink stays; what feeds it moved
        part = self.part_stmt[own]
        merge_stmt = own if joined is None else joined
        name = equation_name(g, own) or "partial"
        t = ir.type_of(g, n)
        if isinstance(op, ir.Reduce):
            result = self._reduce(n, op, t, part, merge_stmt, name, joined is not None)
        elif self._pair_operand(n) is not None:
            result = self._pair(n, op, t, part, merge_stmt, name)
        else:
            a, b = (self.masked(self._read(u, part), 0.0, part) for u in ir.operands(g, n))
            axes = tuple(self.s if ax == self.x else ax for ax in op.axes)
            union = tuple(dict.fromkeys(ir.type_of(g, a).axes + ir.type_of(g, b).axes))
            c = self.add(ir.Contract(axes), ir.ArrayType(     # (the diagram's product, where
                tuple(ax for ax in union if ax not in axes), t.dtype), [a, b], part,   # an
                span=g.nodes[n]["span"])          # error about its kernel points: N0606)
            result = self._merge("sum", self._store(c, f"{name}.part", part), t.dtype, merge_stmt)
            if ir.type_of(g, result).axes != t.axes:
                result = self.add(ir.Assign(self.fresh(f"{name}.merged")), t, [result], merge_stmt)
        redirect(g, n, result)


def _share_axis(g, name: str, source: str, parts: int) -> ir.Axis:
    info = g.graph["axes"][source]
    size = share(info.size, parts) if info.size is not None else None
    return ir.Axis(name, size, name, None, derived=None if size is not None else (source, parts))
