"""Napkin expression text for diagrams napkin derives (`compiler/grad.py`): an expression
with what the reverse sweep needs to know of it, products by the einsum rule, calls and
parentheses. Texts are fully parenthesised; `strip` drops a pair where it is safe."""

from __future__ import annotations

from dataclasses import dataclass

from . import ir


@dataclass
class Expr:
    text: str
    axes: frozenset
    sums: bool = False      # holds a contraction (a product that sums an axis)
    mask: str | None = None  # a condition outside which this cotangent is exactly 0 (from `where`)
    layout: tuple = ()       # a named array's axes in its layout order (for positional renaming)
    mask_axes: frozenset = frozenset()   # the axes of `mask`
    over: frozenset | None = None        # the axes it stands for when it is broadcast along
                                         # more than `axes` (the text has): a sum along one of
                                         # those is a product with its size


def product(a: str, a_axes, b: str, b_axes, out_axes) -> Expr:
    """`a * b` summed over the axes missing from `out_axes` (the einsum rule); an axis only
    one factor has is summed inside that factor first, so the product stays a contraction."""
    a_axes, b_axes, out = set(a_axes), set(b_axes), set(out_axes)
    summed = (a_axes | b_axes) - out
    only_a, only_b = (summed & a_axes) - b_axes, (summed & b_axes) - a_axes
    if only_a:
        a = f"sum[{' '.join(sorted(only_a))}]({strip(a)})"
    if only_b:
        b = f"sum[{' '.join(sorted(only_b))}]({strip(b)})"
    return Expr(f"({a} * {b})", frozenset((a_axes | b_axes) - summed), bool(summed - only_a - only_b))


def reduce_to(part: Expr, axes: tuple[str, ...]) -> Expr:
    extra = (part.over or part.axes) - set(axes)
    if not extra:
        return part if part.over is None else Expr(part.text, part.axes, part.sums, part.mask,
                                                   part.layout, part.mask_axes)
    summed, repeated = sorted(extra & part.axes), sorted(extra - part.axes)
    text = part.text
    if summed:          # (the mask is summed away)
        text = f"sum[{' '.join(summed)}]({strip(text)})"
    if repeated:        # a sum of a value repeated along the axis: the value times its size
        text = f"({text} * {' * '.join(f'size({a})' for a in repeated)})"
    return Expr(text, part.axes - extra, part.sums)


_OPS = {v[0]: k for k, v in ir.OPERATORS.items()}
_UN = {v[0]: k for k, v in ir.UNARY.items()}


def call(fn: str, args: list[str]) -> str:
    if fn in _OPS:
        return f"({args[0]} {_OPS[fn]} {args[1]})"
    if fn in _UN:
        return f"({_UN[fn]} {args[0]})" if fn == "not" else f"({_UN[fn]}{args[0]})"
    return f"{fn}({', '.join(strip(a) for a in args)})"


def wrap(text: str) -> str:
    return text if strip(text) != text else f"({text})"


def strip(text: str) -> str:
    """Drop one pair of outer parentheses when they enclose the whole text."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(text) - 1:
                return text
        return text[1:-1]
    return text


def _size(name: str, info, axes: dict) -> str:
    """An axis's size in the header: its static size, else `= size(i)` where a dynamic axis
    `i` declared before it is in its size class (the forward's size equation, which the
    derived text may no longer read: `A[i i]`'s gradient reads no A), else nothing."""
    if info.size is not None:
        return f" = {info.size}"
    first = next(a for a, other in axes.items() if other.rep == info.rep)
    return f" = size({first})" if first != name else ""


def header(g, title: str, subtitle: str, copies: dict | None = None) -> list[str]:
    """A derived diagram's opening lines: comments, its axes (static sizes kept; `copies`:
    new axes, each as large as the axis it names), its inputs."""
    lines = [f"# {title}"] + ([f"# {subtitle}"] if subtitle else []) + [""]
    axes = dict(g.graph["axes"])
    axes.update({new: axes[old] for new, old in (copies or {}).items()})
    lines.append("axis " + ", ".join(name + _size(name, a, axes) for name, a in axes.items()))
    lines.append("")
    for name, n in g.graph["inputs"].items():
        lines.append(f"in {name}[{' '.join(ir.type_of(g, n).axes)}]: {ir.op(g, n).dtype}")
    return lines
