"""Name resolution and type checking of one equation's right-hand side.

Turns the syntax tree of an expression into a tree of `RNode`s: each name
resolved to an array, an axis index, a function or a reduction; each node with
its value kind ("float", "int" or "bool") and its free axes (those not bound by an
explicit reduction). Contractions are placed afterwards by `einsum.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagrams import ast, limits
from ..diagrams.diagnostics import Label, Span, did_you_mean, error
from .axes import SizeClasses
from .positions import exact_quotients
from . import ir
from .ir import BUILTINS, FUNCTIONS, INDEX_REDUCTIONS, OPERATORS, REDUCTIONS, SCANS, UNARY


class Poisoned(Exception):
    """An equation uses a name whose own definition failed: report nothing more."""


@dataclass
class RNode:
    kind: str            # const index size array map reduce softmax
    span: Span
    vkind: str = "float"   # float | int | bool
    children: list["RNode"] = field(default_factory=list)
    fn: str = ""         # map / reduce function
    axes: tuple[str, ...] = ()   # array: labels; reduce/softmax: axes; index/size: (axis,)
    value: float = 0.0
    array: str = ""
    node: int = -1               # array: the graph node holding it
    op_span: Span | None = None  # the operator's own span (for messages)
    free: frozenset = frozenset()   # free axes before contraction
    contract: tuple[str, ...] = ()  # axes summed at this node (einsum rule)
    out: tuple[str, ...] = ()       # result axes after contraction, in order
    rule: str = ""                  # map: the signature's result kind ("same": by the arguments)
    positions: tuple = ()           # a gather (array with children): label or None per position


@dataclass(frozen=True)
class ArrayInfo:
    name: str
    axes: tuple[str, ...]
    vkind: str
    span: Span
    node: int


@dataclass
class Scope:
    axes: dict[str, Span]                 # declared axes
    arrays: dict[str, ArrayInfo]          # arrays defined so far
    later: dict[str, Span]                # arrays defined further down
    poisoned: set[str]
    sizes: SizeClasses
    sized: frozenset = frozenset()   # axes read as their sizes in positions (positions.py)
    in_position: int = 0
    exact: list = field(default_factory=list)   # quotients of sizes that must divide
    later_inputs: set = field(default_factory=set)   # inputs whose `in` is further down
    arrays_anywhere: frozenset = frozenset()   # every array's name (the one being defined too)


def resolve(expr: ast.Expr, scope: Scope) -> RNode:
    node = _resolve(expr, scope)
    _assign_free(node)
    return node


def _resolve(e: ast.Expr, scope: Scope) -> RNode:
    if isinstance(e, ast.Number):
        if _is_integer(e.text):      # (its value exactly: a float is exact only to 2^53)
            return RNode("const", e.span, "int", value=int(e.text))
        return RNode("const", e.span, "float", value=e.value)
    if isinstance(e, ast.Inf):
        return RNode("const", e.span, value=float("inf"))
    if isinstance(e, ast.UnOp):
        fn, kinds, result = UNARY[e.op]
        child = _resolve(e.operand, scope)
        _expect(child, kinds[0], e.op)
        if fn == "pos":
            return child
        return RNode("map", e.span, _result(result, [child]), [child], fn=fn, op_span=e.op_span,
                     rule=result)
    if isinstance(e, ast.BinOp):
        fn, kinds, result = OPERATORS[e.op]
        left, right = _resolve(e.left, scope), _resolve(e.right, scope)
        _expect(left, kinds[0], e.op)
        _expect(right, kinds[1], e.op)
        return RNode("map", e.span, _result(result, [left, right]), [left, right], fn=fn,
                     op_span=e.op_span, rule=result)
    assert isinstance(e, ast.Ref)
    if e.args is not None:
        return _call(e, scope)
    return _name(e, scope)


def _is_integer(text: str) -> bool:
    """`2` is an integer literal; `2.0`, `.5` and `1e3` are floats."""
    return text.isdigit()


def _result(kind: str, args: list[RNode]) -> str:
    """The value kind of a result: "same" is int when every numeric argument is an int."""
    if kind != "same":
        return kind
    nums = [a.vkind for a in args if a.vkind != "bool"]
    return "int" if nums and all(k == "int" for k in nums) else "float"


def retype(node: RNode) -> str:
    """Value kinds again once contractions are placed: a contraction is a sum, computed in
    floating point whatever its factors are (as every reduction but argmax/argmin)."""
    for child in node.children:
        retype(child)
    if node.kind == "map":
        if node.contract:
            node.vkind = "float"
        elif node.rule == "same":
            node.vkind = _result("same", node.children)
    return node.vkind


def _expect(node: RNode, kind: str, where: str) -> None:
    if kind == "any" or node.vkind == kind or (kind == "num" and node.vkind != "bool"):
        return
    if kind == "num":
        raise error("N0402", f"`{where}` needs a number, but this is a boolean", node.span,
                    help="turn a condition into a number with `where(cond, 1, 0)` or `int(cond)`")
    raise error("N0403", f"`{where}` needs a boolean, but this is a number", node.span,
                help="compare it to get a boolean, e.g. `X > 0`")


def _name(e: ast.Ref, scope: Scope) -> RNode:
    name = e.name.text
    if name in scope.arrays:
        return _array(e, scope.arrays[name], scope)
    if name in scope.poisoned:
        raise Poisoned(name)
    if name in scope.axes:
        if e.axes is None and scope.in_position and name in scope.sized:
            return RNode("size", e.span, "int", axes=(name,))
        if e.axes is not None:
            raise error("N0208", f"`{name}` is an axis; its index takes no brackets", e.axes_span,
                        help=f"write `{name}` alone for the index along it")
        return RNode("index", e.span, "int", axes=(name,))
    if name in BUILTINS:
        shape = f"{name}[axes](...)" if name in REDUCTIONS + SCANS or name == "softmax" \
            else f"{name}(...)"
        raise error("N0208", f"`{name}` is a function, not a value", e.span, help=f"call it: `{shape}`")
    if name in scope.later:
        if name in scope.later_inputs:
            raise error("N0203", f"input `{name}` is used before its `in` declaration", e.span,
                        labels=[Label(scope.later[name], "declared here, later")],
                        help=f"move `in {name}` above the first equation that uses it")
        raise error("N0203", f"`{name}` is used before it is defined", e.span,
                    labels=[Label(scope.later[name], "defined here, later")],
                    help="move this equation below the one that defines it")
    raise error("N0203", f"undefined name `{name}`", e.span,
                help=did_you_mean(name, list(scope.arrays) + list(scope.axes),
                              "declare it with `in` or define it with an equation first"))


def _array(e: ast.Ref, info: ArrayInfo, scope: Scope) -> RNode:
    if e.axes is None:
        return RNode("array", e.span, info.vkind, array=info.name, axes=info.axes, node=info.node)
    e = ast.Ref(e.name, split_positions(e.axes, scope), e.args, e.span, e.axes_span)
    if len(e.axes) != len(info.axes):
        raise error("N0302", f"`{info.name}` has {len(info.axes)} axes "
                    f"[{' '.join(info.axes)}], but {len(e.axes)} are named here", e.axes_span,
                    labels=[Label(info.span, f"`{info.name}` defined with {len(info.axes)} axes")],
                    help="name one axis per position of the array")
    positions, children = [], []
    for pos, (declared, p) in enumerate(zip(info.axes, e.axes)):
        if isinstance(p, ast.Name):
            _check_axis(p, scope)
            scope.sizes.union(p.text, declared, p.span, f"naming dimension {pos} of "
                              f"`{info.name}` (`{declared}`) as `{p.text}`")
            positions.append(p.text)
        else:
            children.append(_position(p, pos, declared, info, scope))
            positions.append(None)
    if not children:
        return RNode("array", e.span, info.vkind, array=info.name, axes=tuple(positions),
                     node=info.node)
    order = [tuple(a for a in dict.fromkeys(_axes_in(c)) if a in c.free) for c in children]
    axes = ir.gather_axes(positions, order)
    return RNode("array", e.span, info.vkind, children, array=info.name, axes=axes,
                 node=info.node, positions=tuple(positions))


def split_positions(positions, scope: Scope) -> tuple:
    """`b (x // 2)` parses as a call of `b`; an axis is no function: it is the position `b`,
    then the parenthesised position `x // 2`. Likewise `pages[b] (x // 2)`, an indexed array
    then a parenthesised position: an indexed array is no function either. A reduction or a
    scan is one (`V[t argmax[c](L)]`: one position, the row's argmax)."""
    out = []
    for p in positions:
        axis = p.axes is None and p.name.text in scope.axes and p.name.text not in scope.arrays \
            if isinstance(p, ast.Ref) else False
        # a reduction (`argmax[v](Z)`) is a call with brackets, not an indexed array
        indexed = isinstance(p, ast.Ref) and p.axes is not None and p.name.text not in BUILTINS
        if isinstance(p, ast.Ref) and p.args is not None and (axis or indexed):
            if len(p.args) != 1:
                what = "an axis" if axis else "an indexed array"
                raise error("N0208", f"`{p.name.text}` is {what}, not a function", p.span,
                            help="a position is an axis, a call, an indexed array or one "
                                 "parenthesised expression")
            first = p.name if axis else ast.Ref(p.name, p.axes, None,
                                                p.name.span.merge(p.axes_span), p.axes_span)
            out += [first, p.args[0]]
        else:
            out.append(p)
    return tuple(out)


def _position(p: ast.Expr, pos: int, declared: str, info: ArrayInfo, scope: Scope) -> RNode:
    """A computed position of a gather: an integer expression."""
    scope.in_position += 1
    try:
        child = _resolve(p, scope)
    finally:
        scope.in_position -= 1
    exact_quotients(child, scope)
    retype(child)
    _assign_free(child)
    if child.vkind != "int":
        what = "a boolean" if child.vkind == "bool" else "a floating-point value"
        raise error("N0406", f"the position along dimension {pos} of `{info.name}` "
                    f"(`{declared}`) must be an integer, but this is {what}", p.span,
                    help="positions are integers: integer arrays, axis indices, `size`, `mod` "
                         "and `+ - * //` of them, quotients of sizes that divide; convert a "
                         "float with `int(...)` (e.g. `floor(x / 2)` or `x // 2`)")
    return child


def _axes_in(node: RNode):
    """Axis names in a resolved expression, in the order they are written."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.kind in ("array", "index"):
            yield from n.axes
        stack.extend(reversed(n.children))


def _check_axis(a: ast.Name, scope: Scope) -> None:
    if a.text not in scope.axes and a.text in scope.arrays:     # (not "undeclared axis")
        info = scope.arrays[a.text]
        axes = ", ".join(f"`{x}`" for x in info.axes) or "none"
        read = f"; to read at its values (a gather), index it: `{a.text}[{' '.join(info.axes)}]`" \
            if info.vkind == "int" else ""
        raise error("N0208", f"`{a.text}` is an array, not an axis", a.span,
                    help=f"name an axis here (the axes of `{a.text}`: {axes}){read}")
    if a.text not in scope.axes and a.text in scope.arrays_anywhere:
        raise error("N0208", f"`{a.text}` is an array, not an axis", a.span,
                    help=did_you_mean(a.text, list(scope.axes), "name an axis here"))
    if a.text not in scope.axes:
        raise error("N0201", f"undeclared axis `{a.text}`", a.span,
                    help=did_you_mean(a.text, list(scope.axes), f"declare it: `axis {a.text}`"))


def _call(e: ast.Ref, scope: Scope) -> RNode:
    name = e.name.text
    args = e.args or ()
    if name in FUNCTIONS:
        kinds, result = FUNCTIONS[name]
        if e.axes is not None:
            raise error("N0208", f"`{name}` is elementwise and takes no axes", e.axes_span,
                        help=f"write `{name}(...)`")
        _arity(e, len(kinds))
        children = [_resolve(a, scope) for a in args]
        for child, kind in zip(children, kinds):
            _expect(child, kind, name)
        return RNode("map", e.span, _result(result, children), children, fn=name,
                     op_span=e.name.span, rule=result)
    if name in REDUCTIONS + SCANS or name == "softmax":
        if e.axes is None or not e.axes:
            pair = {"max": "larger", "min": "smaller"}.get(name) if len(args) == 2 else None
            raise error("N0208", f"`{name}` needs the axes it works along", e.span,
                        help=f"write `{name}[x](...)`" if pair is None else
                        f"`{name}[x](...)` reduces along x; the {pair} of two values is "
                        f"`{name}imum(a, b)`")
        _arity(e, 1)
        _names_only(e)
        axes = _distinct_axes(e.axes, scope)
        child = _resolve(args[0], scope)
        _expect(child, "num", name)
        _assign_free(child)
        for a in e.axes:
            if a.text not in child.free:
                raise error("N0307", f"`{name}` works along `{a.text}`, but its argument does "
                            "not have that axis", a.span,
                            help=f"the argument has axes [{' '.join(sorted(child.free))}]")
        if name in INDEX_REDUCTIONS + SCANS and len(axes) != 1:
            raise error("N0208", f"`{name}` works along one axis, but {len(axes)} are named",
                        e.axes_span, help=f"write `{name}[x](...)`")
        kind = "softmax" if name == "softmax" else "scan" if name in SCANS else "reduce"
        vkind = "int" if name in INDEX_REDUCTIONS else "float"
        return RNode(kind, e.span, vkind, [child], fn=name, axes=axes, op_span=e.name.span)
    if name == "size":
        if e.axes is not None:
            raise error("N0208", "`size` takes an axis in parentheses", e.axes_span,
                        help="write `size(d)`")
        _arity(e, 1)
        arg = args[0]
        if not (isinstance(arg, ast.Ref) and arg.axes is None and arg.args is None):
            raise error("N0208", "`size` takes the name of an axis", _span(arg),
                        help="write `size(d)` for the size of axis `d`")
        _check_axis(arg.name, scope)
        return RNode("size", e.span, "int", axes=(arg.name.text,))
    if name in scope.arrays or name in scope.axes:
        what = "an array" if name in scope.arrays else "an axis"
        raise error("N0208", f"`{name}` is {what}, not a function", e.name.span,
                    help="napkin has no implicit multiplication: write `*` between factors")
    raise error("N0204", f"unknown function `{name}`", e.name.span,
                help=did_you_mean(name, sorted(BUILTINS), "functions are " + ", ".join(sorted(BUILTINS))))


def _arity(e: ast.Ref, n: int) -> None:
    got = len(e.args or ())
    if got != n:
        plural = "s" if n != 1 else ""
        raise error("N0404", f"`{e.name.text}` takes {n} argument{plural}, but {got} "
                    f"{'was' if got == 1 else 'were'} given",
                    e.span, help=_signature(e.name.text))


def _signature(name: str) -> str:
    if name == "where":
        return "`where(cond, a, b)` picks `a` where `cond` holds, else `b`"
    if name in ("maximum", "minimum", "mod", "pow"):
        return f"`{name}(a, b)` is elementwise"
    if name in REDUCTIONS + SCANS or name == "softmax":
        return f"`{name}[x](expr)` takes one expression"
    if name == "size":
        return "`size(d)` takes one axis"
    return f"`{name}(x)` takes one argument"


def _names_only(e: ast.Ref) -> None:
    for p in e.axes:
        if not isinstance(p, ast.Name):
            raise error("N0208", f"`{e.name.text}` takes the names of the axes it works along",
                        p.span, help=f"write `{e.name.text}[x](...)`")


def _distinct_axes(names, scope: Scope) -> tuple[str, ...]:
    seen: dict[str, Span] = {}
    for a in names:
        _check_axis(a, scope)
        if a.text in seen:
            raise error("N0306", f"axis `{a.text}` is listed twice", a.span,
                        labels=[Label(seen[a.text], "first here")], help="list each axis once")
        seen[a.text] = a.span
    if len(seen) > limits.MAX_RANK:
        raise error("N0506", f"{len(seen)} axes; the limit is {limits.MAX_RANK}", names[0].span,
                    help="merge axes that always travel together into one")
    return tuple(seen)


def _span(e: ast.Expr) -> Span:
    return e.span


def _assign_free(node: RNode) -> frozenset:
    """Free axes (before contraction) of every node below, children first."""
    if node.free or node.kind in ("const", "size"):
        return node.free
    if node.kind in ("array", "index"):
        node.free = frozenset(node.axes)
        return node.free
    inner = frozenset().union(*(_assign_free(c) for c in node.children))
    node.free = inner - frozenset(node.axes) if node.kind == "reduce" else inner
    return node.free

