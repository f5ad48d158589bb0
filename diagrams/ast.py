"""The syntax tree of a diagram: frozen dataclasses, each with its source span.

The tree is what the text says, nothing resolved: a `Ref` may turn out to be an
array, an axis index, a function call or a reduction; that is decided when the
compiler builds the graph IR.
"""

from __future__ import annotations

from dataclasses import dataclass

from .diagnostics import Source, Span


@dataclass(frozen=True)
class Name:
    text: str
    span: Span


@dataclass(frozen=True)
class SizeLit:
    """An integer literal for a size (`axis d = 64`, `group q by 128`); checked later."""

    text: str
    negative: bool
    span: Span


# --- expressions -------------------------------------------------------------

@dataclass(frozen=True)
class Number:
    value: float
    text: str
    span: Span


@dataclass(frozen=True)
class Inf:
    span: Span


@dataclass(frozen=True)
class Ref:
    """`NAME`, `NAME[axes]`, `NAME(args)` or `NAME[axes](args)`. A position in the brackets is
    an axis name, or (a gather, `E[tok[t] m]`) an integer expression."""

    name: Name
    axes: tuple["Name | Expr", ...] | None
    args: tuple["Expr", ...] | None
    span: Span
    axes_span: Span | None = None


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / < <= > >= == != and or
    left: "Expr"
    right: "Expr"
    span: Span
    op_span: Span


@dataclass(frozen=True)
class UnOp:
    op: str  # - + not
    operand: "Expr"
    span: Span
    op_span: Span


Expr = Number | Inf | Ref | BinOp | UnOp


# --- statements --------------------------------------------------------------

@dataclass(frozen=True)
class SizeOf:
    """`size(i)` as an axis's size: as large as the axis `i` (`fn` the name written)."""
    fn: Name
    axis: Name
    span: Span


@dataclass(frozen=True)
class AxisItem:
    name: Name
    size: SizeLit | None
    same: SizeOf | None = None        # `axis j = size(i)`


@dataclass(frozen=True)
class AxisDecl:
    items: tuple[AxisItem, ...]
    span: Span


@dataclass(frozen=True)
class InputItem:
    name: Name
    axes: tuple[Name, ...]
    axes_span: Span
    dtype: Name | None
    span: Span


@dataclass(frozen=True)
class InputDecl:
    items: tuple[InputItem, ...]
    span: Span


@dataclass(frozen=True)
class OutputItem:
    name: Name
    dtype: Name | None
    span: Span


@dataclass(frozen=True)
class OutputDecl:
    items: tuple[OutputItem, ...]
    span: Span


@dataclass(frozen=True)
class Hint:
    kind: str  # "group" | "stream" | "split"
    axis: Name
    size: SizeLit
    level: Name | None
    span: Span


@dataclass(frozen=True)
class Equation:
    name: Name
    axes: tuple[Name, ...] | None
    axes_span: Span | None
    expr: Expr
    span: Span
    dtype: Name | None = None     # `H[t f]: bf16 = ...`: its storage dtype across kernels


Statement = AxisDecl | InputDecl | OutputDecl | Hint | Equation


@dataclass(frozen=True)
class Program:
    statements: tuple[Statement, ...]
    source: Source


def children(expr: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of an expression node, left to right."""
    if isinstance(expr, BinOp):
        return (expr.left, expr.right)
    if isinstance(expr, UnOp):
        return (expr.operand,)
    if isinstance(expr, Ref) and expr.args:
        return expr.args
    return ()


