"""The reverse sweep's state (compiler/grad.py): fresh names and axes, the forward values
the backward reads (copied equations, inlined elementwise text, one name for a value the
forward computes twice) and the cotangents' named equations (one name for equal ones)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import DiGraph

from . import ir
from .gradtext import Expr, call, product, strip, wrap

ELEMENTWISE = (ir.Map, ir.Const, ir.Index, ir.SizeOf)
INLINE_LIMIT = 48           # an adjoint longer than this gets a name of its own


@dataclass
class Sweep:
    g: DiGraph
    saved: bool
    taken: set = field(default_factory=set)
    names: dict = field(default_factory=dict)        # forward node -> its name in the text
    alias: dict = field(default_factory=dict)        # node -> the Assign naming the same value
    needed: set = field(default_factory=set)         # forward nodes whose equations are copied
    equations: list = field(default_factory=list)    # backward equations, in order
    extra_inputs: list = field(default_factory=list)  # (name, axes, dtype)
    lse: dict = field(default_factory=dict)          # softmax node -> its saved logsumexp's name
    row: dict = field(default_factory=dict)          # softmax node -> its row term from saved values
    inner: dict = field(default_factory=dict)        # softmax node -> (its one contraction, the
                                                     # row's axes, the axes D sums): D from the
                                                     # contraction's computed cotangent, and the
                                                     # contraction copied with the softmax online
    cotangent: dict = field(default_factory=dict)    # node -> the text of its cotangent, once swept
    sources: dict = field(default_factory=dict)      # saved input -> the statistics output it is
    before: dict = field(default_factory=dict)       # forward node -> equations copied before its own
    first: list = field(default_factory=list)        # equations before the backward's own
    new_axes: dict = field(default_factory=dict)     # fresh axis -> the forward axis it copies
    memo: dict = field(default_factory=dict)         # (expression, axes) -> the name it has
    copies: dict = field(default_factory=dict)       # (axes, dtype, definition) -> the node copied
    loaded: dict = field(default_factory=dict)       # the backward's input name -> its axes
    layouts: dict = field(default_factory=dict)      # a named cotangent -> its axes, in order

    def fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def fresh_axis(self, axis: str) -> str:
        """A new axis of the same size as `axis` (a summed copy where a name is taken)."""
        name = self.fresh(axis)
        self.new_axes[name] = axis
        return name

    def axes(self, n: int) -> tuple[str, ...]:
        return ir.type_of(self.g, n).axes

    # --- forward values ------------------------------------------------------------
    def value(self, n: int) -> str:
        """Text of a forward node's value inside a backward expression."""
        n = self.alias.get(n, n)
        op = ir.op(self.g, n)
        if n not in self.names and isinstance(op, ir.View) and \
                isinstance(ir.op(self.g, ir.operands(self.g, n)[0]), ir.Input):
            return f"{self.value(ir.operands(self.g, n)[0])}[{' '.join(op.labels)}]"  # no copy
        if n not in self.names and not isinstance(op, ELEMENTWISE):
            # a value the forward computes twice (the same gather written in two statements)
            # is copied once, under one name
            key = (self.axes(n), ir.type_of(self.g, n).dtype, self.definition(n))
            m = self.copies.setdefault(key, n)
            if m != n:
                order = ir.order(self.g)
                if order.index(n) < order.index(m):     # the name goes to the first in order
                    self.names[n] = self.names.pop(m)
                    self.needed.discard(m)
                    self.copies[key], m, n = n, n, m
                self.alias[n] = m
                return self.value(m)
            self.names[n] = self.fresh(f"t{n}")
        if n in self.names:
            self.needed.add(n)
            return self.names[n]
        text = self.inline(n)
        if len(text) > INLINE_LIMIT and isinstance(op, ir.Map):   # recomputed once, by name
            self.names[n] = self.fresh(f"t{n}")
            self.needed.add(n)
            return self.names[n]
        return text

    def inline(self, n: int, sub=None) -> str:
        """Text of an elementwise node, its operands given by `sub` (default: `value`)."""
        op, args = ir.op(self.g, n), ir.operands(self.g, n)
        if isinstance(op, ir.Const):
            v = op.value
            integer = ir.kind_of_dtype(ir.type_of(self.g, n).dtype) == "int"
            text = "inf" if v == float("inf") else "-inf" if v == float("-inf") else \
                str(int(v)) if integer else repr(float(v))
            return f"({text})" if text.startswith("-") else text
        if isinstance(op, ir.Index):
            return op.axis
        if isinstance(op, ir.SizeOf):
            return f"size({op.axis})"
        if isinstance(op, ir.Map):
            return call(op.fn, [(sub or self.value)(a) for a in args])
        raise AssertionError(op)  # pragma: no cover - value() names every other node

    def within(self, a: int, stmt) -> str:
        """Operand text inside a copied forward equation: what the user wrote in the same
        statement stays inline (so it fuses and contracts as before), the rest by name."""
        a = self.alias.get(a, a)
        if a in self.names or ir.op(self.g, a).__class__ is ir.Input or self.g.nodes[a]["stmt"] != stmt:
            return self.value(a)
        if isinstance(ir.op(self.g, a), ELEMENTWISE):
            return self.inline(a, lambda b: self.within(b, stmt))
        return wrap(self.definition(a))

    def definition(self, n: int) -> str:
        """The right-hand side of a named forward node's copied equation."""
        op, args = ir.op(self.g, n), ir.operands(self.g, n)
        stmt = self.g.nodes[n]["stmt"]
        sub = lambda a: self.within(a, stmt)     # noqa: E731
        if isinstance(op, ir.Assign):
            o = args[0]
            return self.definition(o) if self.alias.get(o) == n else sub(o)
        if isinstance(op, ir.Contract):
            a, b = args
            online = {self.alias.get(m, m): f"softmax[{' '.join(ir.op(self.g, m).axes)}]"
                          f"({strip(sub(ir.operands(self.g, m)[0]))})"
                      for m, (c, _, _) in self.inner.items() if c == n}
            text = lambda m: online.get(m) or sub(m)        # noqa: E731
            return product(text(a), self.axes(a), text(b), self.axes(b), self.axes(n)).text
        if isinstance(op, (ir.Reduce, ir.Scan)):
            return f"{op.fn}[{' '.join(op.axes)}]({strip(sub(args[0]))})"
        if isinstance(op, ir.Softmax):
            x = sub(args[0])
            if n in self.lse:
                return f"where({self.lse[n]} == -inf, 0, exp({x} - {self.lse[n]}))"
            return f"softmax[{' '.join(op.axes)}]({strip(x)})"
        if isinstance(op, ir.View):
            return f"{self.value(args[0])}[{' '.join(op.labels)}]"
        if isinstance(op, ir.Gather):            # computed positions, each parenthesised
            index = iter(args[1:])
            positions = [label if label is not None else f"({strip(sub(next(index)))})"
                         for label in op.labels]
            return f"{self.value(args[0])}[{' '.join(positions)}]"
        return self.inline(n, sub)

    # --- cotangents ------------------------------------------------------------------
    def named(self, expr: Expr, base: str, axes: tuple[str, ...], own: bool = False) -> Expr:
        """A name for `expr` over `axes`: the one an equal expression already has, or (and
        always with `own`: an output, which no other output may share) a new equation."""
        key = (strip(expr.text), tuple(axes))
        name = None if own else self.memo.get(key)
        if name is None:
            name = self.fresh(base)
            self.memo.setdefault(key, name)
            self.equations.append(f"{name}[{' '.join(axes)}] = {key[0]}")
            self.layouts[name] = tuple(axes)
        return Expr(name, frozenset(axes), mask=expr.mask, layout=tuple(axes), mask_axes=expr.mask_axes)

    def plain(self, text: str, axes, base: str, layout=None) -> str:
        """A name for an expression (itself when it is one), over `layout` where given."""
        if text.isidentifier():
            return text
        order = layout or [a for a in self.g.graph["axes"] if a in set(axes)]
        return self.named(Expr(text, frozenset(axes)), base, tuple(order)).text

    def layout_of(self, name: str):
        """The axes, in layout order, of an input, a named cotangent or a copied forward value
        of the backward's, or None (a forward value's factors stay in a product that
        local_merge.py reads as it is: canonical.py hoists none out of `dWq = dQ * N1`)."""
        return self.loaded.get(name) or self.layouts.get(name) or next(
            (self.axes(n) for n in self.needed if self.names.get(n) == name), None)

    def total(self, n: int, parts: list[Expr], base: str, force_name: bool = False,
              own: bool = False, layout=None) -> Expr:
        """The cotangent of node n: the sum of its contributions, named when it must be (over
        `layout`, a permutation of n's axes, where given)."""
        axes = layout or self.axes(n)
        if len(parts) > 1:
            parts = [self.named(p, f"g{n}", tuple(a for a in axes if a in p.axes)) if p.sums else p
                     for p in parts]
            expr = Expr("(" + " + ".join(p.text for p in parts) + ")", frozenset().union(*(p.axes for p in parts)))
        else:
            expr = parts[0]
        simple = expr.text.isidentifier()
        if simple and not own and (expr.layout or not force_name):
            return expr
        if force_name or (not simple and (expr.sums or len(expr.text) > INLINE_LIMIT)):
            if not own and expr.axes < frozenset(axes):
                # a cotangent repeated along axes its text lacks (`dL[t]` of M = sum[t](L) / c
                # is dM / c) is named over the axes it has, standing for all of n's: the
                # diagram says no more than it computes (no N0703) and a sum along a missing
                # axis is a product with its size (gradtext.reduce_to)
                named = self.named(expr, base, tuple(a for a in axes if a in expr.axes))
                return Expr(named.text, named.axes, mask=named.mask, layout=named.layout,
                            mask_axes=named.mask_axes, over=frozenset(axes))
            return self.named(expr, base, axes, own)
        return expr


__all__ = ["Sweep", "ELEMENTWISE", "INLINE_LIMIT"]
