"""Random well-typed diagrams: a Hypothesis strategy that builds `.napkin` text.

Every construct of the language appears: elementwise functions and operators,
comparisons and `where` masks built from axis indices, `size()`, positional
renaming (transposes, diagonals), contractions by the einsum rule, every
reduction (several axes at once too), softmax, masked maxima and softmax with
`-inf`, several outputs, f32/f16/bf16, scalars and broadcast left-hand sides;
language 1.1's integer and boolean inputs (`in I0[i]: i32`, `in B0[i j]: bool`),
gathers (a position computed from an integer array, itself read at computed
positions once deep, a reversal, a halving, a `mod` or a clamp: always inside its
axis), integer equations (`argmax`/`argmin` of exactly computed values, `mod`, `//`,
`int`, `floor`), scans (`cumsum`, `cumprod`), `log1p`, `expm1`, `pow`, and integer
outputs (`out E2: i32`). `tests/fuzz/test_out_of_range.py` puts positions outside their
axes on purpose.

Values stay bounded so that nothing overflows (or hits a domain edge) by
accident: each node carries a bound on |value| computed after the einsum rule
has placed the contractions; a node over the cap gets its largest operand
divided by a power of two (exact), `exp` arguments are kept below 8, `log`,
`sqrt`, `rsqrt` and divisions only see values >= 0.5. Comparisons only look
at values every backend computes exactly (axis indices, sizes, inputs,
dyadic constants). Arrays that may hold -inf/+inf (masked maxima) are only
stored or clamped. Float inputs are uniform in [-1, 1] (never zero or constant);
an integer input holds integers in the range its comment line in the text gives
(`# I0 holds integers in [0, 7)`), so a saved case replays with the same values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

SIZES = (2, 3, 1, 7, 31, 64, 97, 128, 257)
AXIS_NAMES = ("i", "j", "k", "l", "m", "n", "p", "r")
DTYPES = ("f32", "f16", "bf16")
INT_DTYPES = ("i32", "i64")
ARRAY_BUDGET = 4096        # elements of any stored array
EQ_BUDGET = 1 << 15        # points of one equation's iteration space
CAP = 2.0e4                # |value| of any node (f16 holds 65504)
WORK = 2.0e7               # an equation's work, nested reductions multiplied (emulator time)
EXP_ARG = 8.0
UNARY = ("tanh", "sigmoid", "relu", "gelu", "silu", "abs", "exp", "exp2", "log", "log2", "sqrt",
         "rsqrt", "neg", "erf", "sin", "cos", "log1p", "expm1")
REDUCTIONS = ("sum", "max", "min", "mean", "logsumexp")
CONSTS = (0.5, 2.0, 1.5, 0.25, 3.0, 0.125, 1e-3, 0.1)
CMPS = ("<", "<=", ">", ">=", "==", "!=")
_RANGE = re.compile(r"^# (\w+) holds integers in \[(-?\d+), (-?\d+)\)$", re.M)


@dataclass(eq=False)
class Node:
    op: str                     # ref idx const size fn bin where cmp logic not red soft
    kids: list = field(default_factory=list)
    free: frozenset = frozenset()   # free axes before contraction
    every: frozenset = frozenset()  # every axis in the subtree (iteration space)
    kind: str = "num"
    exact: bool = False
    name: str = ""              # ref: array; fn/bin/red: function or operator; idx/size: axis
    labels: tuple = ()          # ref: positional labels; red/soft: axes
    value: float = 0.0
    contract: tuple = ()        # bin *: axes the generator means to contract here
    special: str = ""           # "-inf"/"+inf": may hold infinities (masked max/min)
    scale: int = 1              # the node's value is divided by this power of two
    bound: float = 0.0
    cost: float = 1.0           # work to compute one element (nested reductions multiply)
    irange: tuple = ()          # an integer node: (lo, hi) with lo <= value < hi, where known


@dataclass(eq=False)
class Array:
    name: str
    axes: tuple
    kind: str = "num"
    bound: float = 1.0
    exact: bool = False         # inputs: what every backend reads exactly
    special: str = ""           # may hold infinities
    masked: str = ""            # "-inf"/"0": where(cond, e, identity) (a reduction's argument)
    cost: float = 1.0           # work to recompute one element where it is used (fusion)
    integer: bool = False       # holds integers (an integer input or an integer equation)
    irange: tuple = ()          # integers: (lo, hi) with lo <= value < hi, where known
    dtype: str = ""             # inputs: the declared dtype


@dataclass(frozen=True)
class Case:
    text: str
    shape: dict                 # sizes of dynamic axes
    seed: int

    def describe(self) -> str:
        return f"shape={self.shape} seed={self.seed}\n{self.text}"


class Gen:
    def __init__(self, draw, positions: bool = False):
        self.draw = draw
        # positions: integer inputs always, read as positions wherever a gather can (the
        # out-of-range test's diagrams); False draws exactly as before
        self.positions = positions

    # -- drawing helpers ----------------------------------------------------------------
    def int(self, lo, hi):
        return self.draw(st.integers(lo, hi))

    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def coin(self, p=0.5):
        return self.draw(st.integers(0, 999)) < int(p * 1000)

    def subset(self, seq, lo=0, hi=None):
        seq = list(seq)
        hi = len(seq) if hi is None else min(hi, len(seq))
        n = self.int(min(lo, hi), hi)
        out = []
        pool = list(seq)
        for _ in range(n):
            a = self.pick(pool)
            pool.remove(a)
            out.append(a)
        return out

    def volume(self, axes) -> int:
        return math.prod(self.sizes[a] for a in axes)

    # -- the diagram -------------------------------------------------------------------
    def diagram(self) -> Case:
        naxes = self.int(1, 5)
        names = list(AXIS_NAMES[:naxes])
        self.sizes = {a: self.pick(SIZES) for a in names}
        self.static = {a: self.coin(0.4) for a in names}
        self.arrays: list[Array] = []
        self.depth = 0                  # gathers whose positions are being drawn (nest one deep)
        self.dtypes_used = set()
        for i in range(self.int(1, 3)):
            axes = self.axes_within(names, ARRAY_BUDGET, 0, 3)
            dt = self.pick(DTYPES)
            self.dtypes_used.add(dt)
            self.arrays.append(Array(f"X{i}", tuple(axes), bound=1.0, exact=True, dtype=dt))
        if self.positions or self.coin(0.35):   # integer inputs: page tables, labels, ids
            for i in range(self.int(1, 2)):
                axes = self.axes_within(names, ARRAY_BUDGET, 0, 2)
                lo = self.pick([0, 0, 0, -3])
                hi = self.pick(sorted({2, 5, *self.sizes.values()}))
                self.arrays.append(Array(f"I{i}", tuple(axes), bound=float(max(1, -lo, hi - 1)),
                                         exact=True, integer=True, irange=(lo, hi),
                                         dtype=self.pick(INT_DTYPES)))
        if self.coin(0.15):              # a mask that arrives as data
            axes = self.axes_within(names, ARRAY_BUDGET, 0, 2)
            self.arrays.append(Array("B0", tuple(axes), kind="bool", exact=True, dtype="bool"))
        used = {a for arr in self.arrays for a in arr.axes}
        for a in names:        # a dynamic axis must get its size from an input
            if a not in used:
                self.static[a] = True
        self.equations = []
        for e in range(self.int(1, 12)):
            self.equation(f"E{e}")
        outs = self.outputs()
        return self.render(names, outs)

    def axes_within(self, names, budget, lo, hi):
        axes = self.subset(names, lo, hi)
        while axes and self.volume(axes) > budget:
            axes.pop()
        return axes

    def outputs(self):
        num = [a for a in self.arrays if a.kind == "num" and a.name.startswith("E")]
        if not num:
            num = [a for a in self.arrays if a.kind == "num"]
        chosen = self.subset(num, 1, 3)
        if self.equations and self.equations[-1][0] in [a.name for a in num] and \
                all(c.name != self.equations[-1][0] for c in chosen) and self.coin(0.7):
            chosen[0] = next(a for a in num if a.name == self.equations[-1][0])
        return [(a, self.pick(INT_DTYPES) if a.integer and self.coin(0.6) else self.pick(DTYPES))
                for a in dict.fromkeys(chosen)]

    # -- equations ---------------------------------------------------------------------
    def equation(self, name: str) -> None:
        form = self.int(0, 10)
        if form == 9:                    # a named boolean mask
            root = self.cond(2)
            lhs = self.lhs(root, set())
            self.equations.append((name, lhs, self.text(root)))
            self.arrays.append(Array(name, tuple(lhs), kind="bool"))
            return
        if form == 10:                   # an integer equation (exact on every backend)
            root = self.integer(2)
            lhs = self.lhs(root, set())
            self.bounds(root)
            self.equations.append((name, lhs, self.text(root)))
            self.arrays.append(Array(name, tuple(lhs), bound=root.bound, exact=True,
                                     integer=True, irange=root.irange))
            return
        masked = ""
        if form == 7:                    # a masked maximum or minimum, stored as it is
            root = self.masked_reduction(2, clamp=False)
        elif form == 8:                    # S = where(cond, e, -inf): a masked score array
            body = self.expr(2)
            masked = self.pick(["-inf", "0"])
            root = Node("where", [self.cond(1), body,
                                  Node("const", value=-math.inf if masked == "-inf" else 0.0)])
            self.finish(root)
        if form < 7:
            root = self.expr(3)
        if root.cost * self.volume(root.free) > WORK:   # nested reductions too costly to emulate
            root, masked = self.leaf(), ""
        lhs = self.lhs(root, self.contractions(root))
        if root.every and self.volume(root.every | set(lhs)) > EQ_BUDGET:
            lhs = [a for a in lhs if a in root.free]
        self.bounds(root)
        special = root.special
        if masked:
            special = "-inf" if masked == "-inf" else ""
        self.equations.append((name, lhs, self.text(root)))
        self.arrays.append(Array(name, tuple(lhs), bound=root.bound, special=special,
                                 masked=masked, cost=root.cost))

    def lhs(self, root: Node, contracted: set) -> list:
        keep = [a for a in root.free if a not in contracted]
        order = []
        pool = sorted(keep)
        while pool:
            a = self.pick(pool)
            pool.remove(a)
            order.append(a)
        others = [a for a in self.sizes if a not in order and a not in root.every]
        if others and self.coin(0.1):
            extra = self.pick(others)
            if self.volume(order + [extra]) <= ARRAY_BUDGET:
                order.insert(self.int(0, len(order)), extra)
        return order

    def contractions(self, root: Node) -> set:
        """Keep the intended contractions the einsum rule really places where intended."""
        out = set()
        for node in _walk(root):
            kept = []
            for axis in node.contract:
                if _lowest_common(root, axis) is node:
                    kept.append(axis)
            node.contract = tuple(kept)
            out.update(kept)
        return out

    # -- expressions -------------------------------------------------------------------
    def operands(self):
        return [a for a in self.arrays if a.kind == "num" and not a.special and not a.masked]

    def leaf(self) -> Node:
        arrays = self.operands()
        choice = self.int(0, 9)
        if arrays and choice < 6:
            recent = arrays[-3:] if self.coin(0.6) else arrays
            return self.ref(self.pick(recent))
        if choice < 8:
            a = self.pick(sorted(self.sizes))
            return self.finish(Node("idx", name=a, exact=True))
        if choice == 8:
            return self.finish(Node("const", value=self.pick(CONSTS), exact=True))
        return self.finish(Node("size", name=self.pick(sorted(self.sizes)), exact=True))

    def ref(self, arr: Array, gather: bool = True) -> Node:
        labels = list(arr.axes)
        if labels and self.coin(0.25):        # positional renaming: transpose, diagonal, rename
            for pos, a in enumerate(arr.axes):
                same = [b for b in sorted(self.sizes) if self.sizes[b] == self.sizes[a]
                        and self.static[b] == self.static[a]]
                if len(same) > 1 and self.coin(0.6):
                    labels[pos] = self.pick(same)
        plain = self.finish(Node("ref", name=arr.name, labels=tuple(labels), exact=arr.exact,
                                 special=arr.special))
        if not (gather and labels and self.coin(0.5 if self.positions else 0.2)):
            return plain
        kids = []                             # a gather: some positions computed
        self.depth += 1
        for pos, a in enumerate(arr.axes):
            if self.coin(0.5) or (pos == len(arr.axes) - 1 and not kids):
                kids.append(self.position(a))
                labels[pos] = None
        self.depth -= 1
        node = self.finish(Node("ref", kids, name=arr.name, labels=tuple(labels),
                                exact=arr.exact, special=arr.special))
        return node if self.volume(node.free) <= ARRAY_BUDGET else plain

    def position(self, axis: str) -> Node:
        """An integer expression whose value lies in [0, size(axis)): a position to read at."""
        n = self.sizes[axis]
        direct = [a for a in self.arrays if a.integer and a.irange and a.irange[0] >= 0
                  and a.irange[1] <= n]
        choice = self.int(0, 4)
        if direct and (choice == 0 or self.positions):   # a page table, a token id: as it is, or
            # itself at computed positions, once (a page table read at x // P: paged KV)
            return self.ref(self.pick(direct), gather=self.depth < 2)
        last = self.finish(Node("bin", [self.size_of(axis), self.const(1)], name="-"))
        if choice == 1:                       # a reversal: (size(a) - 1) - b, size(b) <= size(a)
            b = self.pick([b for b in sorted(self.sizes) if self.sizes[b] <= n])
            return self.finish(Node("bin", [last, self.index(b)], name="-"))
        if choice == 2:                       # halving: b // 2 with (size(b) - 1) // 2 < size(a)
            fits = [b for b in sorted(self.sizes) if (self.sizes[b] - 1) // 2 < n]
            if fits:
                return self.finish(Node("bin", [self.index(self.pick(fits)), self.const(2)],
                                        name="//"))
        e = self.any_integer()
        if choice == 3:                       # a clamp into the axis
            low = self.finish(Node("fn", [e, self.const(0)], name="maximum"))
            return self.finish(Node("fn", [low, last], name="minimum"))
        return self.finish(Node("fn", [e, self.size_of(axis)], name="mod"))

    def any_integer(self) -> Node:
        """An integer expression of modest size, of any sign (a position before its wrap)."""
        ints = [a for a in self.arrays if a.integer]
        choice = self.int(0, 3)
        if ints and choice == 0:
            return self.ref(self.pick(ints), gather=False)
        axes = sorted(self.sizes)
        if choice == 1:
            return self.finish(Node("bin", [self.index(self.pick(axes)),
                                            self.index(self.pick(axes))], name="+"))
        floats = [a for a in self.arrays if a.name.startswith("X")]
        if choice == 2 and floats:            # int() of an exactly read float, toward zero
            scaled = self.finish(Node("bin", [self.ref(self.pick(floats), gather=False),
                                              self.const(8)], name="*"))
            return self.finish(Node("fn", [scaled], name="int"))
        return self.finish(Node("bin", [self.index(self.pick(axes)), self.const(3)], name="*"))

    def integer(self, depth: int) -> Node:
        """An integer expression computed exactly everywhere: argmax/argmin of exactly
        computed values, mod, floor division, floor, clamps and integer inputs."""
        choice = self.int(0, 5)
        if choice <= 1:
            arg = self.exact_num() if self.coin(0.5) else self.ref(self.pick(
                [a for a in self.arrays if a.exact and a.kind == "num"]))
            if arg.free:
                axis = self.pick(sorted(arg.free))
                node = self.finish(Node("red", [arg], name=self.pick(["argmax", "argmin"]),
                                        labels=(axis,)))
                node.irange = (0, self.sizes[axis])
                return node
        if choice == 2:
            axis = self.pick(sorted(self.sizes))
            node = self.finish(Node("fn", [self.any_integer(), self.size_of(axis)], name="mod"))
            node.irange = (0, self.sizes[axis])
            return node
        if choice == 3:
            return self.finish(Node("bin", [self.any_integer(), self.const(self.pick([2, 3, -2]))],
                                    name="//"))
        if choice == 4:                       # floor of an exact quotient
            q = self.finish(Node("bin", [self.index(self.pick(sorted(self.sizes))),
                                         self.const(4.0)], name="/"))
            return self.finish(Node("fn", [q], name="floor"))
        if depth > 0:
            return self.finish(Node("fn", [self.integer(depth - 1), self.integer(depth - 1)],
                                    name=self.pick(["maximum", "minimum"])), fallback=True)
        return self.any_integer()

    def index(self, axis: str) -> Node:
        return self.finish(Node("idx", name=axis, exact=True))

    def size_of(self, axis: str) -> Node:
        return self.finish(Node("size", name=axis, exact=True))

    def const(self, value) -> Node:
        return self.finish(Node("const", value=value, exact=True))

    def expr(self, depth: int) -> Node:
        if depth <= 0 or self.coin(0.25):
            return self.leaf()
        kind = self.int(0, 11)
        if kind == 10:
            return self.scan(depth)
        if kind == 11:
            return self.power(depth) if self.coin(0.5) else self.integer(depth - 1)
        if kind <= 2:
            return self.binary(depth)
        if kind == 3:
            return self.unary(depth)
        if kind == 4:
            return self.reduction(depth)
        if kind == 5:
            return self.softmax(depth)
        if kind == 6:
            return self.where(depth)
        if kind == 7:
            return self.masked_reduction(depth)
        if kind == 8:
            return self.product(depth)
        return self.finish(Node("fn", [self.expr(depth - 1), self.expr(depth - 1)],
                                name=self.pick(["maximum", "minimum"])), fallback=True)

    def binary(self, depth) -> Node:
        op = self.pick(["+", "-", "*", "/"])
        a = self.expr(depth - 1)
        if op == "/":
            return self.finish(Node("bin", [a, self.denominator(depth - 1)], name="/"),
                               fallback=True)
        return self.finish(Node("bin", [a, self.expr(depth - 1)], name=op), fallback=True)

    def product(self, depth) -> Node:
        """A product that contracts the axes its factors share (the einsum rule)."""
        a, b = self.expr(depth - 1), self.expr(depth - 1)
        made = Node("bin", [a, b], name="*")
        node = self.finish(made, fallback=True)
        if node is made:        # (over budget, finish falls back to `a`: contract nothing)
            shared = sorted(a.free & b.free)
            node.contract = tuple(self.subset(shared, 1 if shared else 0, 2))
            node.cost *= self.volume(node.contract)
        return node

    def denominator(self, depth) -> Node:
        which = self.int(0, 3)
        if which == 0:
            return self.finish(Node("const", value=self.pick([2.0, 0.5, 3.0, 7.0, -4.0])))
        if which == 1:
            return self.finish(Node("size", name=self.pick(sorted(self.sizes))))
        if which == 2:
            return self.finish(Node("fn", [self.finish(Node("size", name=self.pick(
                sorted(self.sizes))))], name="sqrt"))
        inner = self.finish(Node("fn", [self.expr(depth)], name="abs"))
        return self.finish(Node("bin", [inner, self.finish(Node("const", value=1.0))], name="+"),
                           fallback=True)

    def unary(self, depth) -> Node:
        fn = self.pick(UNARY)
        arg = self.expr(depth - 1)
        if fn in ("log", "log2", "sqrt", "rsqrt", "log1p"):      # keep the argument >= 0.5
            arg = self.finish(Node("bin", [self.finish(Node("fn", [arg], name="abs")),
                                          self.finish(Node("const", value=0.5))], name="+"))
        return self.finish(Node("fn", [arg], name=fn))

    def reduction(self, depth) -> Node:
        arg = self.expr(depth - 1)
        if not arg.free:
            return arg
        axes = self.subset(sorted(arg.free), 1, 3)
        return self.finish(Node("red", [arg], name=self.pick(REDUCTIONS), labels=tuple(axes)))

    def scan(self, depth) -> Node:
        """cumsum / cumprod along one axis (kept); cumprod's argument is scaled into [-1, 1]."""
        arg = self.expr(depth - 1)
        if not arg.free:
            return arg
        return self.finish(Node("scan", [arg], name=self.pick(["cumsum", "cumprod"]),
                                labels=(self.pick(sorted(arg.free)),)))

    def power(self, depth) -> Node:
        """pow(|e| + 0.5, c) or (|e| + 0.5) ** c: a positive base, a small exponent."""
        base = self.finish(Node("bin", [self.finish(Node("fn", [self.expr(depth - 1)],
                                                         name="abs")),
                                        self.finish(Node("const", value=0.5))], name="+"))
        exponent = self.finish(Node("const", value=self.pick([2, 3, 0.5, -1, 1.5])))
        if self.coin(0.5):
            return self.finish(Node("bin", [base, exponent], name="**"))
        return self.finish(Node("fn", [base, exponent], name="pow"))

    def softmax(self, depth) -> Node:
        arg = self.expr(depth - 1)
        if not arg.free:
            return arg
        axes = self.subset(sorted(arg.free), 1, 2)
        return self.finish(Node("soft", [arg], labels=tuple(axes)))

    def masked_reduction(self, depth, clamp: bool = True) -> Node:
        """softmax/max/logsumexp over where(cond, e, -inf), sum over where(cond, e, 0), or a
        masked array defined earlier."""
        masked = [a for a in self.arrays if a.masked]
        if masked and self.coin(0.6):
            arr = self.pick(masked)
            arg = self.ref(arr)
            ident = arr.masked
        else:
            ident = self.pick(["-inf", "0", "+inf"])
            body = self.expr(depth - 1)
            value = {"-inf": -math.inf, "0": 0.0, "+inf": math.inf}[ident]
            arg = self.finish(Node("where", [self.cond(1), body, Node("const", value=value)]))
        if not arg.free:
            return self.leaf()
        axes = tuple(self.subset(sorted(arg.free), 1, 2))
        if ident == "-inf":
            fn = self.pick(["softmax", "max", "logsumexp"])
        elif ident == "+inf":
            fn = "min"
        else:
            fn = self.pick(["sum", "mean", "softmax"])
        if fn == "softmax":
            return self.finish(Node("soft", [arg], labels=axes))
        node = self.finish(Node("red", [arg], name=fn, labels=axes))
        if ident in ("-inf", "+inf"):
            node.special = ident
            clamp = "maximum" if ident == "-inf" else "minimum"
            limit = -8.0 if ident == "-inf" else 8.0
            if clamp:               # inside an expression: clamped; at the top: stored
                return self.finish(Node("fn", [node, self.finish(Node("const", value=limit))],
                                        name=clamp))
        return node

    def where(self, depth) -> Node:
        return self.finish(Node("where", [self.cond(1), self.expr(depth - 1),
                                          self.expr(depth - 1)]), fallback=True)

    # -- conditions: only exactly computed values -------------------------------------------
    def exact_num(self) -> Node:
        choice = self.int(0, 5)
        axes = sorted(self.sizes)
        if choice <= 1:
            return self.finish(Node("idx", name=self.pick(axes), exact=True))
        if choice == 2:
            op = self.pick(["-", "+", "*", "/"])
            left = self.finish(Node("idx", name=self.pick(axes), exact=True))
            if op in ("*", "/"):
                right = self.finish(Node("const", value=self.pick([2.0, 0.5, 4.0])))
            else:
                right = self.finish(Node("idx", name=self.pick(axes), exact=True))
            return self.finish(Node("bin", [left, right], name=op, exact=True), fallback=True)
        if choice == 3:
            inputs = [a for a in self.arrays if a.exact and a.kind == "num"]
            if inputs:
                return self.ref(self.pick(inputs))
        if choice == 4:
            return self.finish(Node("size", name=self.pick(axes), exact=True))
        return self.finish(Node("const", value=self.pick([0.0, 1.0, 3.0, 0.5, -0.25, 16.0]),
                                exact=True))

    def cond(self, depth) -> Node:
        masks = [a for a in self.arrays if a.kind == "bool"]
        choice = self.int(0, 5)
        if masks and choice == 5:
            return self.ref(self.pick(masks))
        if depth > 0 and choice == 4:
            inner = self.cond(depth - 1)
            if self.coin(0.3):
                return self.finish(Node("not", [inner], kind="bool"))
            return self.finish(Node("logic", [inner, self.cond(depth - 1)],
                                    name=self.pick(["and", "or"]), kind="bool"), fallback=True)
        a, b = self.exact_num(), self.exact_num()
        return self.finish(Node("cmp", [a, b], name=self.pick(CMPS), kind="bool"), fallback=True)

    # -- bookkeeping -------------------------------------------------------------------
    def finish(self, node: Node, fallback: bool = False) -> Node:
        """Free axes and iteration space; a combination over budget falls back to its first
        operand."""
        arrays = {a.name: a for a in self.arrays}
        if node.op == "ref":               # named positions, and the axes of computed ones
            node.free = frozenset(a for a in node.labels if a is not None).union(
                *(k.free for k in node.kids))
            node.kind = arrays[node.name].kind
        elif node.op == "idx":
            node.free = frozenset([node.name])
        elif node.op in ("const", "size"):
            node.free = frozenset()
        elif node.op == "red":
            node.free = node.kids[0].free - set(node.labels)
        else:
            node.free = frozenset().union(*(k.free for k in node.kids))
        node.every = frozenset(node.free).union(*(k.every for k in node.kids))
        if node.op == "ref":
            node.cost = arrays[node.name].cost
        elif node.op in ("red", "soft", "scan"):
            node.cost = self.volume(node.labels) * node.kids[0].cost
        elif node.kids:
            node.cost = sum(k.cost for k in node.kids)
        if fallback and node.every and self.volume(node.every) > EQ_BUDGET:
            if node.op == "cmp":
                return self.finish(Node("cmp", [node.kids[0], self.finish(
                    Node("const", value=0.0))], name=node.name, kind="bool"))
            return next(k for k in node.kids if k.kind == node.kind)
        return node

    def bounds(self, node: Node) -> float:
        """|value| bound after contractions; rescales operands so every node stays under CAP."""
        for k in node.kids:
            self.bounds(k)
        node.bound = self._bound(node)
        for _ in range(64):
            if node.bound <= CAP:
                break
            nums = [k for k in node.kids if k.kind == "num" and k.bound > 1.0]
            if not nums:
                break
            big = max(nums, key=lambda k: k.bound)
            factor = 2 ** max(1, math.ceil(math.log2(node.bound / CAP)))
            big.scale *= factor
            big.bound /= factor
            node.bound = self._bound(node)
        return node.bound

    def _bound(self, node: Node) -> float:
        b = [k.bound for k in node.kids]
        op = node.op
        if op == "ref":
            return next(a.bound for a in self.arrays if a.name == node.name)
        if op == "idx":
            return max(1.0, self.sizes[node.name] - 1.0)
        if op == "size":
            return float(self.sizes[node.name])
        if op == "const":
            return abs(node.value) if math.isfinite(node.value) else 0.0
        if op in ("cmp", "logic", "not"):
            return 0.0
        if op == "where":
            return max(b[1], b[2])
        if op == "soft":
            return 1.0
        if op == "scan":
            n = self.volume(node.labels)
            if node.name == "cumsum":
                return b[0] * n
            arg = node.kids[0]
            while arg.bound > 1.0:             # a product of values in [-1, 1] stays there
                arg.scale *= 2
                arg.bound /= 2
            return 1.0
        if op == "red":
            n = self.volume(node.labels)
            if node.name in ("argmax", "argmin"):
                return float(max(1, n - 1))
            if node.name == "sum":
                return b[0] * n
            if node.name == "logsumexp":
                return b[0] + math.log(n) + 1
            return b[0]
        if op == "bin":
            if node.name in ("+", "-"):
                return b[0] + b[1]
            if node.name == "*":
                return b[0] * b[1] * self.volume(node.contract)
            if node.name == "//":
                return b[0] + 1.0
            if node.name == "**":
                return _power_bound(b[0], node.kids[1].value)
            return b[0] / 0.5
        fn = node.name
        if fn == "pow":
            return _power_bound(b[0], node.kids[1].value)
        if fn == "mod":
            return max(1.0, b[1])
        if fn in ("int", "float", "floor", "ceil"):
            return b[0] + 1.0
        if fn in ("exp", "exp2", "expm1"):
            arg = node.kids[0]
            while arg.bound > EXP_ARG:
                arg.scale *= 2
                arg.bound /= 2
            return 2.0 ** arg.bound if fn == "exp2" else math.exp(arg.bound)
        if fn in ("tanh", "sigmoid", "erf", "sin", "cos"):
            return 1.0
        if fn in ("log", "log2", "log1p"):
            return max(1.5, math.log(b[0] + 1) + 1)
        if fn == "sqrt":
            return math.sqrt(b[0]) + 1
        if fn == "rsqrt":
            return 1.5
        if fn in ("maximum", "minimum"):
            return max(b)
        return b[0] + 1.0          # relu gelu silu abs neg

    # -- text --------------------------------------------------------------------------
    def text(self, node: Node) -> str:
        t = self._text(node)
        if node.scale != 1:
            t = f"({t} / {node.scale})"
        return t

    def _text(self, node: Node) -> str:
        op = node.op
        if op == "ref":
            arr = next(a for a in self.arrays if a.name == node.name)
            if tuple(node.labels) != arr.axes:
                computed = iter(node.kids)
                positions = [a if a is not None else _position(self.text(next(computed)))
                             for a in node.labels]
                return f"{node.name}[{' '.join(positions)}]"
            return node.name
        if op in ("idx",):
            return node.name
        if op == "size":
            return f"size({node.name})"
        if op == "const":
            return _number(node.value)
        kids = [self.text(k) for k in node.kids]
        if op == "fn":
            if node.name == "neg":
                return f"(-{kids[0]})"
            return f"{node.name}({', '.join(kids)})"
        if op in ("bin", "cmp", "logic"):
            return f"({kids[0]} {node.name} {kids[1]})"
        if op == "not":
            return f"(not {kids[0]})"
        if op == "where":
            return f"where({kids[0]}, {kids[1]}, {kids[2]})"
        if op in ("red", "scan"):
            return f"{node.name}[{' '.join(node.labels)}]({kids[0]})"
        assert op == "soft"
        return f"softmax[{' '.join(node.labels)}]({kids[0]})"

    def declared(self, outs) -> dict:
        """Storage dtypes declared on some float equations (`H[t f]: f16 = ...`): one in five,
        chosen by a hash of the equation (no draw: the cases without one stay as they were);
        f16 only where the values stay in its range; an output declares its own dtype."""
        import zlib
        out_dtype = {a.name: dt for a, dt in outs}
        found = {}
        for arr in self.arrays:
            eq = next((e for e in self.equations if e[0] == arr.name), None)
            if eq is None or arr.kind != "num" or arr.integer or \
                    zlib.crc32(f"{eq[0]}|{eq[2]}".encode()) % 5:
                continue
            if arr.name in out_dtype:
                if out_dtype[arr.name] in DTYPES:
                    found[arr.name] = out_dtype[arr.name]
                continue
            found[arr.name] = "f16" if arr.bound < 6e4 else "bf16"
        return found

    def render(self, names, outs) -> Case:
        lines = ["# generated by tests/fuzz/gen.py"]
        dyn = [a for a in names if not self.static[a]]
        stat = [a for a in names if self.static[a]]
        if dyn:
            lines.append("axis " + ", ".join(dyn))
        if stat:
            lines.append("axis " + ", ".join(f"{a} = {self.sizes[a]}" for a in stat))
        for arr in self.arrays:
            if arr.dtype:
                lines.append(f"in {arr.name}[{' '.join(arr.axes)}]: {arr.dtype}")
        for arr in self.arrays:
            if arr.dtype in INT_DTYPES:
                lines.append(f"# {arr.name} holds integers in [{arr.irange[0]}, {arr.irange[1]})")
        declared = self.declared(outs)
        for name, lhs, text in self.equations:
            dt = f": {declared[name]}" if name in declared else ""
            lines.append(f"{name}[{' '.join(lhs)}]{dt} = {text}")
        lines.append("out " + ", ".join(f"{a.name}: {declared.get(a.name, dt)}" for a, dt in outs))
        shape = {a: self.sizes[a] for a in dyn}
        return Case("\n".join(lines) + "\n", shape, self.int(0, 2**16))


def _number(v: float) -> str:
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v < 0:
        return f"(-{_number(-v)})"
    if v == int(v):
        return str(int(v))
    return repr(v)


def _power_bound(base: float, exponent: float) -> float:
    """|base ** exponent| for a base in [0.5, base]."""
    return max(base ** exponent, 0.5 ** exponent)


def _position(text: str) -> str:
    """A computed position as the grammar takes it: a call, an indexed array, or else
    parenthesised."""
    if re.fullmatch(r"[A-Za-z_]\w*(\(.*\)|\[[^\]]*\])", text):
        return text
    return f"({text})"


def _walk(node: Node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.kids)


def _lowest_common(root: Node, axis: str) -> Node:
    node = root
    while True:
        if node.op in ("soft", "scan") and axis in node.labels:
            return node          # the einsum rule cannot sum inside a softmax or scan over the axis
        holders = [c for c in node.kids if axis in c.free]
        if len(holders) != 1:
            return node
        node = holders[0]


@st.composite
def diagrams(draw, positions: bool = False) -> Case:
    """A random well-typed diagram, its dynamic sizes and an input seed (`positions`: biased
    to integer inputs read as gathers' positions, Gen)."""
    return Gen(draw, positions).diagram()


def _library_ids(diagram, shape: dict, seed: int) -> dict[str, np.ndarray]:
    """The integer inputs napkin run draws (commands.run.random_inputs): a position read from
    an array stays inside the axis it indexes (an embedding's tok over v of size 1 is 0)."""
    from napkin.commands.run import random_inputs
    return random_inputs(diagram, shape, seed)


def inputs_for(diagram, shape: dict, seed: int) -> dict[str, np.ndarray]:
    """Uniform inputs in [-1, 1] in their storage dtypes (never zero, never constant);
    integers uniform in the range the text's comment gives them, booleans fair coins."""
    from napkin.runtime import dtypes
    axes = diagram.ir.graph["axes"]
    by_rep = {axes[a].rep: s for a, s in shape.items() if a in axes}
    ranges = {m[1]: (int(m[2]), int(m[3])) for m in _RANGE.finditer(diagram.source.text)}
    rng = np.random.default_rng(seed)
    out = {}
    for s in diagram.inputs:
        dims = tuple(axes[a].size if axes[a].size is not None else
                     shape.get(a, by_rep.get(axes[a].rep)) for a in s.axes)
        if s.dtype == "bool":
            out[s.name] = rng.random(dims) < 0.5
            continue
        if s.dtype in INT_DTYPES:
            if s.name not in ranges:      # (a library diagram: napkin's own ids, inside the
                out[s.name] = _library_ids(diagram, shape, seed)[s.name]   # axes they index)
                continue
            lo, hi = ranges[s.name]
            out[s.name] = rng.integers(lo, hi, dims).astype(dtypes.numpy_dtype(s.dtype))
            continue
        data = rng.uniform(-1.0, 1.0, dims)
        data = np.where(np.abs(data) < 1e-3, 0.5, data)
        out[s.name] = data.astype(dtypes.numpy_dtype(s.dtype))
    return out
