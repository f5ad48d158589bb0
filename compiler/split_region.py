"""What a split of a reduced axis can rewrite (compiler/split.py): the reductions over the axis
that merge (sinks), the nodes carrying the axis that feed them (the region), and why an
axis does not split. A standalone softmax over the axis is first written in a form whose
statistics are a reduction (`normalisations`)."""

from __future__ import annotations

from .graph import DiGraph, ancestors
import numpy as np

from . import ir, row_state
from .canonical import through

MERGEABLE = ("sum", "max", "min", "logsumexp", "mean", "var", "argmax", "argmin")


class NotSplittable(Exception):
    """Why an axis cannot be split (a reason for explain and for N0607)."""


def normalisations(g: DiGraph, axis: str, within: frozenset | None = None) -> DiGraph:
    """A softmax over `axis` alone that no contraction over `axis` takes (a standalone softmax,
    whose output keeps the axis) becomes where(L == -inf, 0, exp(S - L)) with
    L = logsumexp[axis](S): the statistics are then a reduction that splits, and the
    normalisation a pass over the whole rows: exp(S - L), with L taken as +inf where a row
    is masked everywhere (it gives 0, as the reference's softmax does; NaN, L itself, for a
    softmax recognised from its written form: ir.Softmax's `written`). `within`: in those
    statements only (Region)."""
    for n in ir.order(g):
        op = ir.op(g, n)
        if not (isinstance(op, ir.Softmax) and op.axes == (axis,)) or \
                (within is not None and g.nodes[n]["stmt"] not in within):
            continue
        users = users_through_assign(g, n)
        if any(isinstance(ir.op(g, v), ir.Contract) and ir.op(g, v).axes == (axis,)
               for v in users):
            continue
        stmt, span = g.nodes[n]["stmt"], g.nodes[n]["span"]
        scores = ir.operands(g, n)[0]
        st = ir.type_of(g, scores)
        f = ir.INTERMEDIATE

        def add(op_, axes, dtype, args):
            return ir.add_node(g, op_, ir.ArrayType(tuple(axes), dtype), args, span=span,
                               stmt=stmt)
        rows = tuple(a for a in st.axes if a != axis)
        lse = add(ir.Reduce("logsumexp", (axis,)), rows, f, [scores])
        shift = lse     # a softmax recognised written out: exp(-inf - -inf), NaN (ir.Softmax)
        if not op.written:
            neg, pos = add(ir.Const(-np.inf), (), f, []), add(ir.Const(np.inf), (), f, [])
            empty = add(ir.Map("eq"), rows, "bool", [lse, neg])
            shift = add(ir.Map("where"), rows, f, [empty, pos, lse])     # exp(S - inf) = 0
        shifted = add(ir.Map("sub"), st.axes, f, [scores, shift])
        out = add(ir.Map("exp"), st.axes, f, [shifted])
        redirect(g, n, out)
    return g


def redirect(g: DiGraph, n: int, result: int) -> None:
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


class Region:
    """The reductions over `axis` that merge (sinks), and the nodes carrying `axis` that
    feed them (the region, rebuilt over the split axes). Other readers of those nodes (an
    output keeping `axis`, a normalisation pass) go on reading the originals."""

    def __init__(self, g: DiGraph, axis: str, within: frozenset | None = None):
        """`within`: the statements of the kernels split (a split of one kernel of a plan:
        compiler/kernel_split.py), None for the whole diagram. Only their reductions over
        `axis` split, and the region stops at the arrays other statements compute (stored
        by their kernels): those enter through gathers as the diagram's inputs do."""
        self.g, self.axis, self.within = g, axis, within
        if axis not in g.graph["axes"]:
            raise NotSplittable(f"the diagram has no axis `{axis}`")
        carries = {n for n in g if axis in ir.type_of(g, n).axes}
        self.sinks = [n for n in ir.order(g) if n not in carries and merges_over(g, n, axis)
                      and any(u in carries for u in ir.operands(g, n))
                      and (within is None or g.nodes[n]["stmt"] in within)]
        if not self.sinks:
            raise NotSplittable(f"no reduction over `{axis}` merges partial states")
        for n in self.sinks:
            if any(m in self.sinks for m in ancestors(g, n)):
                raise NotSplittable(f"a reduction over `{axis}` reads another one's result "
                                    "(its partial states would wait for the other's merge)")
        inside: set[int] = set()
        stack = [u for n in self.sinks for u in ir.operands(g, n) if u in carries]
        while stack:
            u = stack.pop()
            if u in inside:
                continue
            inside.add(u)
            mine = within is None or g.nodes[u]["stmt"] in within
            if mine and not self._moves(u):     # (a view moving the axis is an entry: read
                stack.extend(v for v in ir.operands(g, u) if v in carries)  # at the split positions)
            elif not mine and ir.operands(g, u) and not isinstance(ir.op(g, u), ir.Assign):
                raise NotSplittable("it reads an unnamed value of another kernel")
            # (else an entry: an array another kernel stores, read as an input is)
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
        users = users_through_assign(g, n)
        paired = any(isinstance(ir.op(g, v), ir.Contract) and ir.op(g, v).axes == (axis,)
                     for v in users)
        for v in users:
            op = ir.op(g, v)
            if v in inside or v in self.sinks:
                # (beside the contraction, a row sum or max of P merges as O does: its
                # partials weighed by softmax[p_x](L_p), split_merges._probabilities)
                if paired and row_state.statistic(g, v, ir.operands(g, n)[0], (axis,), n):
                    continue
                if not (isinstance(op, ir.Contract) and op.axes == (axis,)):
                    raise NotSplittable(f"softmax[{axis}] reaches a reduction other than one "
                                        f"contraction over `{axis}`")

    def _moves(self, n: int) -> bool:
        """Whether n is a view of an array carrying the axis that reads it from another of
        the array's axes (`A[j i]` of A[i j], a diagonal `A[i i]`): the view's values enter
        the region as an array would, gathered at the split positions (`sum[i j](A[j i])`
        was refused and ran in one block: 178 us against 6.65 us, model, h100, i=j=1024)."""
        g, axis = self.g, self.axis
        if not isinstance(ir.op(g, n), ir.View):
            return False
        base_axes = ir.type_of(g, ir.operands(g, n)[0]).axes
        labels = ir.op(g, n).labels
        return axis in base_axes and axis in labels and (
            labels[base_axes.index(axis)] != axis or list(labels).count(axis) != 1)

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


def merges_over(g, n: int, axis: str) -> bool:
    op = ir.op(g, n)
    if isinstance(op, ir.Reduce):
        return axis in op.axes and op.fn in MERGEABLE
    return isinstance(op, ir.Contract) and axis in op.axes


def users_through_assign(g, n):
    out = []
    for v in g.successors(n):
        if isinstance(ir.op(g, v), ir.Assign) and through(g, v) == n:
            out.extend(users_through_assign(g, v))
        else:
            out.append(v)
    return out
