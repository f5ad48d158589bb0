"""Two readings of computed positions that make the language's own examples mean what they say
(docs/language.md, "Computed positions"):

- An axis named bare inside a computed position, where it is no wire of the equation (not on the
  left, not a position of any array, not reduced, not an index used elsewhere), is its size:
  `Kc[pages[b floor(x / P)] mod(x, P) h d]` reads `P` as `size(P)`, the page size. (As an index
  it would be summed over or refused: P names no wire there.)
- A quotient of sizes in a position (`size(d) / 2`, sizes and integer literals only) is an
  integer when it divides exactly: `X[t mod(d + size(d) / 2, size(d))]`. It is checked once the
  sizes are known (N0408 when it does not divide: napkin never rounds a float to an index
  silently); a quotient involving an index or an array value stays a float (N0406 asks for `//`).
"""

from __future__ import annotations

from ..diagrams import ast
from ..diagrams.diagnostics import error
from .ir import REDUCTIONS, SCANS

# A size expression: ("size", axis) | ("const", n) | (op, left, right) | ("neg", e)
_INT_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "floordiv": lambda a, b: a // b if b else 0, "mod": lambda a, b: a % b if b else 0}


def sized_axes(stmt: ast.Equation, scope, split_positions) -> frozenset:
    """Axes named bare only inside computed positions of `stmt` and nowhere as its wires."""
    wires: set = {a.text for a in stmt.axes or ()}
    bare: set = set()

    def walk(e, inside: bool) -> None:
        if isinstance(e, ast.Name):
            wires.add(e.text)
        elif isinstance(e, ast.UnOp):
            walk(e.operand, inside)
        elif isinstance(e, ast.BinOp):
            walk(e.left, inside)
            walk(e.right, inside)
        elif isinstance(e, ast.Ref):
            name = e.name.text
            if e.args is None and e.axes is None:
                if name in scope.arrays:
                    wires.update(scope.arrays[name].axes)
                elif name in scope.axes:
                    (bare if inside else wires).add(name)
            elif e.args is None:
                for p in split_positions(e.axes, scope):
                    if isinstance(p, ast.Name):
                        wires.add(p.text)
                    else:
                        walk(p, True)
            elif name != "size":
                if name in REDUCTIONS + SCANS or name == "softmax":
                    wires.update(a.text for a in e.axes or () if isinstance(a, ast.Name))
                for a in e.args:
                    walk(a, inside)

    walk(stmt.expr, False)
    return frozenset(bare - wires)


def exact_quotients(node, scope) -> None:
    """Turn each quotient of sizes under `node` (a resolved position) into an exact integer
    division, recording it in `scope.exact` to be checked when the sizes are known."""
    for child in node.children:
        exact_quotients(child, scope)
    if node.kind == "map" and node.fn == "div" and all(_sizes_only(c) for c in node.children):
        node.fn, node.rule, node.vkind = "floordiv", "same", "int"
        scope.exact.append((node.op_span or node.span, _expr(node.children[0]),
                            _expr(node.children[1])))


def _sizes_only(node) -> bool:
    if node.kind == "size":
        return True
    if node.kind == "const":
        return node.vkind == "int"
    return node.kind == "map" and node.vkind == "int" and (node.fn in _INT_OPS or node.fn == "neg") \
        and all(_sizes_only(c) for c in node.children)


def _expr(node) -> tuple:
    if node.kind == "size":
        return ("size", node.axes[0])
    if node.kind == "const":
        return ("const", int(node.value))
    return (node.fn, *(_expr(c) for c in node.children))


def value(expr: tuple, sizes: dict) -> int:
    """A size expression's value at these sizes."""
    head = expr[0]
    if head == "size":
        return int(sizes[expr[1]])
    if head == "const":
        return expr[1]
    if head == "neg":
        return -value(expr[1], sizes)
    return _INT_OPS[head](value(expr[1], sizes), value(expr[2], sizes))


def check_exact(requirements, sizes: dict, source=None) -> None:
    """N0408 for a quotient of sizes in a position that is no integer at these sizes."""
    for span, num, den in requirements:
        axes = _axes(num) | _axes(den)
        if not axes <= set(sizes):
            continue            # (known at call time)
        a, b = value(num, sizes), value(den, sizes)
        if b == 0 or a % b:
            at = ", ".join(f"{x}={sizes[x]}" for x in sorted(axes))
            got = "a division by zero" if b == 0 else f"{a} / {b} = {a / b:g}"
            raise error("N0408", f"this quotient of sizes is a position, but at {at} it is {got}, "
                        "not an integer", span, source=source,
                        help="a position must be an integer: pick sizes it divides, or write `//` "
                             "to round down")


def _axes(expr: tuple) -> set:
    if expr[0] == "size":
        return {expr[1]}
    return set().union(*(_axes(e) for e in expr[1:] if isinstance(e, tuple)))
