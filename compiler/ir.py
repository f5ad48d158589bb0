"""The graph IR: a DiGraph of ops (compiler/graph.py); edges carry the arrays between them.

Node attributes:
    op    -- a frozen dataclass below (what the box does)
    type  -- ArrayType of the node's result (axes in layout order, dtype)
    span  -- the diagram span the node came from (None for synthesised nodes)
    stmt  -- index of the equation it belongs to (None for inputs/outputs)
Edge attributes:
    array -- the ArrayType carried (always the producer's type)
    ports -- the operand positions of the consumer this producer feeds; one
             edge serves both operands of `X * X`.

Graph attributes (``g.graph``): ``axes`` (name -> Axis), ``inputs`` and
``outputs`` (name -> node id, in declaration order), ``arrays`` (every named
array -> node id), ``hints`` (tuple of Hint), ``equations`` (tuple of
EquationInfo), ``source`` (the Source).
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import DiGraph, ordered

from ..diagrams.diagnostics import Span

FLOAT_DTYPES = ("f32", "f16", "bf16")
INT_DTYPES = ("i32", "i64")
INPUT_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)
OUTPUT_DTYPES = FLOAT_DTYPES + INT_DTYPES
INTERMEDIATE = "f32"
INT_INTERMEDIATE = "i64"   # integers are computed in 64 bits

# Value kinds of the type rules (docs/language.md): "float", "int" or "bool". In the
# signatures below an argument kind "num" takes an int or a float, "any" also a boolean;
# a result kind "same" is int when every numeric argument is an int, else float.
FUNCTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    **{f: (("num",), "float") for f in (
        "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "gelu",
        "silu", "erf", "log1p", "expm1", "sin", "cos")},
    **{f: (("num",), "same") for f in ("relu", "abs")},
    **{f: (("num",), "int") for f in ("floor", "ceil")},   # as Python's math.floor
    "maximum": (("num", "num"), "same"),
    "minimum": (("num", "num"), "same"),
    "mod": (("num", "num"), "same"),
    "pow": (("num", "num"), "float"),
    "where": (("bool", "num", "num"), "same"),
    "float": (("any",), "float"),
    "int": (("any",), "int"),
}
# Operators as elementwise functions.
OPERATORS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "+": ("add", ("num", "num"), "same"),
    "-": ("sub", ("num", "num"), "same"),
    "*": ("mul", ("num", "num"), "same"),
    "/": ("div", ("num", "num"), "float"),
    "//": ("floordiv", ("num", "num"), "same"),
    "**": ("pow", ("num", "num"), "float"),
    "<": ("lt", ("num", "num"), "bool"),
    "<=": ("le", ("num", "num"), "bool"),
    ">": ("gt", ("num", "num"), "bool"),
    ">=": ("ge", ("num", "num"), "bool"),
    "==": ("eq", ("num", "num"), "bool"),
    "!=": ("ne", ("num", "num"), "bool"),
    "and": ("and", ("bool", "bool"), "bool"),
    "or": ("or", ("bool", "bool"), "bool"),
}
UNARY: dict[str, tuple[str, tuple[str, ...], str]] = {
    "-": ("neg", ("num",), "same"),
    "+": ("pos", ("num",), "same"),
    "not": ("not", ("bool",), "bool"),
}
REDUCTIONS = ("sum", "max", "min", "mean", "logsumexp", "argmax", "argmin")
INDEX_REDUCTIONS = ("argmax", "argmin")     # their result is an integer position
SCANS = ("cumsum", "cumprod")               # reductions that keep their axis (prefixes)
INTERNAL_REDUCTIONS = ("var",)   # produced by canonicalisation, never written by users
SPECIAL = ("softmax", "size")
BUILTINS = frozenset(FUNCTIONS) | frozenset(REDUCTIONS) | frozenset(SCANS) | frozenset(SPECIAL)


def kind_of_dtype(dtype: str) -> str:
    """The value kind an array of this dtype holds: "bool", "int" or "float"."""
    if dtype == "bool":
        return "bool"
    return "int" if dtype in INT_DTYPES or dtype == "index" else "float"


def dtype_of_kind(kind: str) -> str:
    """The dtype an intermediate of this value kind is computed in."""
    return {"bool": "bool", "int": INT_INTERMEDIATE}.get(kind, INTERMEDIATE)



@dataclass(frozen=True)
class ArrayType:
    axes: tuple[str, ...]
    dtype: str  # f32 f16 bf16 i32 i64 (storage or compute), "bool", "index"

    def __str__(self) -> str:
        return f"[{' '.join(self.axes)}] {self.dtype}"


@dataclass(frozen=True)
class Axis:
    name: str
    size: int | None       # static size, or None when read from the inputs
    rep: str               # representative of its size class (axes forced equal)
    span: Span | None
    derived: tuple[str, int] | None = None   # a split's share: ceil(size(source) / parts)
    merged: tuple[str, ...] | None = None    # axes merged into this one (merge.py): the product


@dataclass(frozen=True)
class HintInfo:
    kind: str              # "group" | "stream" | "split"
    axis: str
    size: int
    level: str | None
    span: Span | None


@dataclass(frozen=True)
class EquationInfo:
    name: str
    axes: tuple[str, ...]
    contracted: tuple[str, ...]
    reduced: tuple[str, ...]
    normalised: tuple[str, ...]   # softmax axes
    broadcast: tuple[str, ...]
    node: int
    span: Span | None
    stmt: int = -1                # index of the statement in the file


# --- ops ---------------------------------------------------------------------

@dataclass(frozen=True)
class Input:
    name: str
    dtype: str


@dataclass(frozen=True)
class Output:
    name: str
    dtype: str


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Index:
    """The index along an axis (a bare axis name in an expression)."""

    axis: str


@dataclass(frozen=True)
class SizeOf:
    axis: str


@dataclass(frozen=True)
class View:
    """Relabels an array's positions (`K[b h d x]`); a repeated label takes the diagonal."""

    labels: tuple[str, ...]


@dataclass(frozen=True)
class Reshape:
    """Reads an array with runs of its adjacent axes as one axis each (compiler/local_merge.py:
    `A[b t h d]` read as `[b t (h*d)]`, position i of `(h*d)` being (i / size(d), i % size(d)));
    row-major, the same memory. The node's type names the merged axes, the axes table their
    parts (`Axis.merged`)."""


@dataclass(frozen=True)
class Gather:
    """Reads an array at computed positions (`E[tok[t] m]`): operand 0 is the array, then one
    integer index per computed position, in order. `labels[k]` names the axis position k is
    read along (a renaming, as a View), or is None where an index operand gives it."""

    labels: tuple[str | None, ...]


def gather_axes(labels, index_axes) -> tuple[str, ...]:
    """The axes of a gather's result: each position's, in order (an index's own axes for a
    computed position)."""
    found: dict[str, None] = {}
    it = iter(index_axes)
    for label in labels:
        found.update(dict.fromkeys((label,) if label is not None else next(it)))
    return tuple(found)


@dataclass(frozen=True)
class Map:
    """Elementwise function of its operands, broadcast by axis name."""

    fn: str


@dataclass(frozen=True)
class Contract:
    """Product of two operands summed over `axes` (the einsum rule)."""

    axes: tuple[str, ...]


@dataclass(frozen=True)
class Reduce:
    fn: str  # sum max min mean logsumexp (and internal: var, the population variance)
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Scan:
    """Inclusive prefixes along one axis (`cumsum`, `cumprod`): the axis is kept."""

    fn: str
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Softmax:
    """`written`: recognised from its written-out form (compiler/written.py), whose edge rows
    it keeps (docs/language.md): "div" from `E / sum[x](E)`, E = exp(S - max[x](S)), NaN on a
    fully masked row (exp(-inf - -inf)) where the built-in ("") gives 0; "contract" from
    `E * V / sum[x](E)`, that and NaN (0 / 0) where x is empty too, where a contraction of
    the probabilities gives 0. Every lowering reads it through `empty_row`."""

    axes: tuple[str, ...]
    written: str = ""       # "" | "div" | "contract"


def empty_row(op: Softmax) -> tuple[float, float]:
    """1 / l where a row's sum of exponentials l is 0: (where the row has positions, all
    -inf; where it has none, as a contraction of the probabilities reads it). A lowering of a
    lone softmax reads the first only (an empty row has no probability)."""
    nan = float("nan")
    return (nan if op.written else 0.0), (nan if op.written == "contract" else 0.0)


@dataclass(frozen=True)
class Assign:
    """A named array: the equation's result in the layout its left-hand side gives."""

    name: str
    dtype: str | None = None    # declared storage dtype (`H[t f]: bf16 = ...`), else f32


Op = Input | Output | Const | Index | SizeOf | View | Reshape | Gather | Map | Contract | Reduce | Scan | Softmax | Assign


# --- access helpers ------------------------------------------------------------

# (the node's attribute dict read directly: these run some 100,000 times a plan, and
# `g.nodes[n]` builds a view each time; networkx's DiGraph keeps the same `_node` dict)
def op(g: DiGraph, n: int):
    return g._node[n]["op"]


def type_of(g: DiGraph, n: int) -> ArrayType:
    return g._node[n]["type"]


def operands(g: DiGraph, n: int) -> list[int]:
    """Operand node ids of `n` in port order."""
    slots: dict[int, int] = {}
    for u, data in g._pred[n].items():      # (g.in_edges(n, data=True), without its list)
        for port in data["ports"]:
            slots[port] = u
    return [slots[i] for i in range(len(slots))]


def order(g: DiGraph) -> list[int]:
    """A deterministic topological order (smallest id first among ready nodes)."""
    return list(ordered(g))


def add_node(g: DiGraph, payload, out: ArrayType, args=(), span: Span | None = None,
             stmt: int | None = None) -> int:
    n = g.number_of_nodes()
    while n in g:
        n += 1
    g.add_node(n, op=payload, type=out, span=span, stmt=stmt)
    for port, u in enumerate(args):
        if g.has_edge(u, n):
            g.edges[u, n]["ports"] = g.edges[u, n]["ports"] + (port,)
        else:
            g.add_edge(u, n, array=type_of(g, u), ports=(port,))
    return n


def readers(g, n: int) -> set[int]:
    """The nodes reading n's values, through the names they are given (`P = softmax[x](S)`
    read as `P * V`: the product reads P's Assign, not the softmax)."""
    out, todo = set(), [n]
    while todo:
        for v in g.successors(todo.pop()):
            if isinstance(op(g, v), Assign):
                todo.append(v)
            else:
                out.add(v)
    return out
