"""Declarations: axes and their sizes, inputs, outputs, schedule hints, -D overrides.

Collects every declaration of a program, checks each (names, sizes, dtypes),
and reports every problem it finds in one go.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagrams import ast, limits
from ..diagrams.diagnostics import Collector, Label, NapkinError, Span, did_you_mean, error
from .axes import SizeClasses
from .ir import BUILTINS, INPUT_DTYPES, OUTPUT_DTYPES, HintInfo

FUTURE_DTYPES = ("f8e4m3", "f8e5m2")


@dataclass
class Declarations:
    axes: dict[str, Span] = field(default_factory=dict)
    sizes: SizeClasses = field(default_factory=SizeClasses)
    inputs: list[ast.InputItem] = field(default_factory=list)
    outputs: list[ast.OutputItem] = field(default_factory=list)
    hints: list[HintInfo] = field(default_factory=list)
    equations: dict[str, Span] = field(default_factory=dict)  # name -> span of first definition


def declare(program: ast.Program, overrides: dict[str, int], errors: Collector) -> Declarations:
    decl = Declarations()
    for stmt in program.statements:
        if isinstance(stmt, ast.AxisDecl):
            for item in stmt.items:
                _guard(errors, _axis, decl, item)
    for name, value in overrides.items():
        _guard(errors, _override, decl, name, value)
    for stmt in program.statements:        # (after -D: `-D j=5` meets `axis j = size(i)`)
        if isinstance(stmt, ast.AxisDecl):
            for item in stmt.items:
                if item.same is not None:
                    _guard(errors, _same_size, decl, item.name, item.same)
    for stmt in program.statements:
        if isinstance(stmt, ast.InputDecl):
            for item in stmt.items:
                _guard(errors, _input, decl, item)
        elif isinstance(stmt, ast.OutputDecl):
            decl.outputs.extend(stmt.items)
        elif isinstance(stmt, ast.Hint):
            _guard(errors, _hint, decl, stmt)
        elif isinstance(stmt, ast.Equation):
            decl.equations.setdefault(stmt.name.text, stmt.name.span)
    return decl


def _guard(errors: Collector, fn, *args) -> None:
    try:
        fn(*args)
    except NapkinError as exc:
        errors.add(exc)


def _reserved(name: ast.Name, what: str) -> None:
    if name.text in BUILTINS:
        raise error("N0206", f"`{name.text}` is a built-in function and cannot name {what}",
                    name.span, help="choose another name")


def _axis(decl: Declarations, item: ast.AxisItem) -> None:
    name = item.name
    _reserved(name, "an axis")
    if name.text in decl.axes:
        raise error("N0202", f"axis `{name.text}` is declared twice", name.span,
                    labels=[Label(decl.axes[name.text], "first declared here")],
                    help="declare each axis once")
    decl.axes[name.text] = name.span
    size = parse_size(item.size) if item.size is not None else None
    decl.sizes.add(name.text, size, item.size.span if item.size else None)


def _same_size(decl: Declarations, name: ast.Name, same: ast.SizeOf) -> None:
    """`axis j = size(i)`: j in i's size class (i declared before it)."""
    if same.fn.text != "size":
        raise error("N0102", f"an axis's size is a whole number or `size(AXIS)`, not "
                    f"`{same.fn.text}(...)`", same.fn.span,
                    help=f"write `axis {name.text} = size({same.axis.text})`")
    other = same.axis.text
    if other == name.text:
        raise error("N0201", f"axis `{other}` is given its own size", same.axis.span,
                    help="name an axis declared before it, or a whole number")
    declared = list(decl.axes)
    if other not in decl.axes or declared.index(other) > declared.index(name.text):
        raise error("N0201", f"undeclared axis `{other}`", same.axis.span,
                    help=f"declare `{other}` before `{name.text}`: `axis {other}, "
                         f"{name.text} = size({other})`")
    decl.sizes.union(name.text, other, same.span, f"`axis {name.text} = size({other})`")


def parse_size(lit: ast.SizeLit) -> int:
    """A size literal to a positive int, or N0304."""
    text = lit.text
    try:
        value = float(text)
    except ValueError:  # pragma: no cover - the grammar only admits numbers
        value = float("nan")
    if lit.negative or value <= 0:
        shown = ("-" if lit.negative else "") + text
        raise error("N0304", f"size `{shown}` is not positive", lit.span,
                    help="sizes are whole numbers of at least 1")
    if not value.is_integer():
        raise error("N0304", f"size `{text}` is not a whole number", lit.span,
                    help="sizes are whole numbers of at least 1")
    if value > limits.MAX_SIZE:
        raise error("N0304", f"size `{text}` is larger than the limit {limits.MAX_SIZE:,}",
                    lit.span, help="sizes must fit in 64-bit index arithmetic")
    return int(value)


def _override(decl: Declarations, name: str, value: int) -> None:
    if name not in decl.axes:
        raise error("N0209", f"-D {name}={value}: the diagram has no axis `{name}`",
                    help=did_you_mean(name, list(decl.axes), "axes: " + ", ".join(decl.axes)))
    if isinstance(value, int) and not isinstance(value, bool) and value > limits.MAX_SIZE:
        raise error("N0304", f"-D {name}={value}: larger than the limit {limits.MAX_SIZE:,} (2^40)",
                    help="sizes must fit in 64-bit index arithmetic")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error("N0304", f"-D {name}={value}: a size must be a whole number of at least 1",
                    help=f"for example -D {name}=128 ({name}=128 in napkin.load or "
                         "napkin.compile)")
    decl.sizes.add(name, value, None, why="set by -D")


def _input(decl: Declarations, item: ast.InputItem) -> None:
    name = item.name
    _reserved(name, "an array")
    if name.text in decl.axes:
        raise error("N0202", f"`{name.text}` names both an axis and an input", name.span,
                    labels=[Label(decl.axes[name.text], "the axis")], help="rename one of them")
    for other in decl.inputs:
        if other.name.text == name.text:
            raise error("N0202", f"input `{name.text}` is declared twice", name.span,
                        labels=[Label(other.name.span, "first declared here")],
                        help="declare each input once")
    check_axes_list(item.axes, decl.axes, item.axes_span, f"input `{name.text}`")
    dtype_of(item.dtype, name, "input")
    decl.inputs.append(item)


def check_axes_list(axes: tuple[ast.Name, ...], declared: dict[str, Span], span: Span,
                    what: str, arrays: frozenset = frozenset()) -> None:
    """Declared, distinct, and not too many: the axes of an input or a left-hand side
    (`arrays`: the diagram's array names, each N0208 here rather than an undeclared axis)."""
    seen: dict[str, Span] = {}
    for a in axes:
        if a.text not in declared and a.text in arrays:
            raise error("N0208", f"`{a.text}` is an array, not an axis", a.span,
                        help=did_you_mean(a.text, list(declared), "name an axis here"))
        if a.text not in declared:
            raise error("N0201", f"undeclared axis `{a.text}`", a.span,
                        help=did_you_mean(a.text, list(declared), f"declare it: `axis {a.text}`"))
        if a.text in seen:
            raise error("N0306", f"axis `{a.text}` appears twice in {what}", a.span,
                        labels=[Label(seen[a.text], "first here")],
                        help="the axes of a stored array are distinct; use X[i i] in an "
                             "expression for a diagonal")
        seen[a.text] = a.span
    if len(axes) > limits.MAX_RANK:
        raise error("N0506", f"{what} has {len(axes)} axes; the limit is {limits.MAX_RANK}", span,
                    help="merge axes that always travel together into one")


def dtype_of(dtype: ast.Name | None, name: ast.Name, role: str) -> str:
    """The dtype an input, an output or an equation's storage (`role`: "input", "output",
    "storage") names, checked (N0401)."""
    allowed = INPUT_DTYPES if role == "input" else OUTPUT_DTYPES
    if dtype is None:
        raise error("N0401", f"{role} `{name.text}` has no dtype", name.span,
                    help=f"give it one: `{'out' if role == 'output' else 'in'} {name.text}"
                         f"{'' if role == 'output' else '[...]'}: f16` (dtypes: "
                         f"{', '.join(allowed)}); items of one line share the dtype "
                         "written after them")
    if dtype.text in allowed:
        return dtype.text
    if dtype.text in FUTURE_DTYPES:
        raise error("N0401", f"dtype `{dtype.text}` is not supported yet", dtype.span,
                    help=f"use one of {', '.join(allowed)}")
    if dtype.text == "bool" and role == "storage":
        raise error("N0401", f"`{name.text}` cannot be stored as `bool`: storage dtypes are "
                    "numbers", dtype.span, help="drop the dtype: a mask is kept as it is")
    if dtype.text == "bool":
        raise error("N0401", "an output cannot be stored as `bool`", dtype.span,
                    help=f"store a mask as a number: `{name.text}i[...] = int(M)` with `: i32`")
    alike = [d for d in allowed if d[:1] == dtype.text[:1]] or list(allowed)  # f64: a float
    raise error("N0401", f"unknown dtype `{dtype.text}`", dtype.span,
                help=did_you_mean(dtype.text, alike, f"dtypes are {', '.join(allowed)}"))


def _hint(decl: Declarations, hint: ast.Hint) -> None:
    if hint.axis.text not in decl.axes:
        raise error("N0201", f"undeclared axis `{hint.axis.text}`", hint.axis.span,
                    help=did_you_mean(hint.axis.text, list(decl.axes), "hints name declared axes"))
    size = parse_size(hint.size)
    level = hint.level.text if hint.level else None
    if hint.kind == "split" and level is not None:
        raise error("N0602", f"`split {hint.axis.text}` takes no level: the splits are blocks",
                    hint.level.span, help=f"write `split {hint.axis.text} by {size}`")
    for other in decl.hints:
        if other.axis == hint.axis.text and other.level == level and \
                (other.kind == "split") == (hint.kind == "split"):
            raise error("N0601", f"axis `{hint.axis.text}` already has a schedule hint"
                        + (f" at `{level}`" if level else ""), hint.span,
                        labels=[Label(other.span, "the first hint")] if other.span else [],
                        help="give each axis one hint per memory level")
    decl.hints.append(HintInfo(hint.kind, hint.axis.text, size, level, hint.span))

