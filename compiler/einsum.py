"""The einsum rule: where each axis that vanishes from an equation is summed.

An axis free on the right but absent from the left is summed over at the
smallest product of two or more array factors that contains all of its free
occurrences. When that smallest subexpression is not such a product (the axis
vanishes under `+`, under a function, or from a single factor) the diagram is
rejected with a request for an explicit reduction.
"""

from __future__ import annotations

from ..diagrams.diagnostics import NapkinError, error
from .resolve import RNode

_SYMBOL = {"add": "+", "sub": "-", "div": "/", "floordiv": "//", "pow": "**", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
           "eq": "==", "ne": "!=", "and": "and", "or": "or", "neg": "-", "not": "not"}


def place_contractions(root: RNode, lhs: tuple[str, ...]) -> None:
    """Mark `contract` on the nodes where vanishing axes are summed; set every `out`."""
    keep = set(lhs)
    for axis in sorted(root.free - keep, key=_first_occurrence_order(root)):
        node = _lowest_common(root, axis)
        if node.kind == "map" and node.fn == "mul":
            node.contract = node.contract + (axis,)
        else:
            raise _vanishes(axis, node)
    _assign_out(root)


def _first_occurrence_order(root: RNode):
    order: dict[str, int] = {}
    stack = [root]
    while stack:
        n = stack.pop()
        if n.kind in ("array", "index"):
            for a in n.axes:
                order.setdefault(a, len(order))
        stack.extend(reversed(n.children))
    return lambda a: order.get(a, len(order))


def _lowest_common(root: RNode, axis: str) -> RNode:
    node = root
    while True:
        if node.kind in ("softmax", "scan") and axis in node.axes:
            return node      # summed below it, the softmax (scan) would lose the axis it runs along
        holders = [c for c in node.children if axis in c.free]
        if len(holders) != 1:
            return node
        node = holders[0]


def _vanishes(axis: str, node: RNode) -> NapkinError:
    keep_help = f"write `sum[{axis}](...)` around the part to sum, or keep `{axis}` on the left"
    if node.kind in ("array", "index"):
        what = f"`{node.array}`" if node.kind == "array" else "its index"
        return error("N0301", f"axis `{axis}` is not on the left, and only {what} has it here: "
                     "there is no product to contract it in", node.span, help=keep_help)
    if node.kind == "map":
        where = _SYMBOL.get(node.fn, node.fn)
        shown = f"`{where}`"
        if node.fn not in _SYMBOL:
            shown = f"the function `{where}`"
        return error("N0301", f"axis `{axis}` vanishes under {shown}, which is not a product",
                     node.op_span or node.span, help=keep_help)
    return error("N0301", f"axis `{axis}` vanishes inside `{node.fn}`", node.span, help=keep_help)


def _assign_out(node: RNode) -> tuple[str, ...]:
    if node.kind in ("array", "index"):
        for child in node.children:      # the positions of a gather
            _assign_out(child)
        node.out = tuple(dict.fromkeys(node.axes))
        return node.out
    if node.kind in ("const", "size"):
        node.out = ()
        return node.out
    axes: dict[str, None] = {}
    for child in node.children:
        axes.update(dict.fromkeys(_assign_out(child)))
    drop = set(node.contract) | (set(node.axes) if node.kind == "reduce" else set())
    node.out = tuple(a for a in axes if a not in drop)
    return node.out


def across_functions(root: RNode) -> list[tuple[str, RNode]]:
    """Contractions that sum one axis over three or more factors, some inside a function.

    `silu(X * Wg) * (X * Wu)` sums its model axis once over the whole product,
    which is what the rule says but rarely what was meant: worth a warning.
    """
    found = []
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        for axis in node.contract:
            leaves, hidden = _count(node, axis)
            if leaves >= 3 and hidden:
                found.append((axis, node))
    return found


def _count(node: RNode, axis: str) -> tuple[int, bool]:
    """(array factors holding `axis` below `node`, whether one is under a non-product). A
    softmax or scan along `axis` is one factor, as `_lowest_common` takes it: the masks and
    scores inside it are not factors of the contraction (`softmax[x](where(kpos[x] <= pos,
    S, -inf)) * V` is attention, with two factors); an index of the axis is no factor
    either (`A * where(x < len[b], V, 0.0)` masks V: two factors)."""
    leaves, hidden = 0, False
    stack = [(node, False)]
    while stack:
        n, under = stack.pop()
        if n.kind == "index":
            continue
        if n.kind in ("array", "softmax", "scan") and axis in n.axes:
            leaves += 1
            hidden = hidden or under
            continue                 # (a gather is one factor, whatever its positions hold)
        below = under or not (n.kind == "map" and n.fn == "mul")
        stack.extend((c, below) for c in n.children if axis in c.free)
    return leaves, hidden


def kept_under_normalisation(root: RNode) -> list[tuple[tuple[str, ...], RNode, RNode]]:
    """Products that keep an axis both factors carry, normalised, reduced or contracted in the
    same statement along an axis only one factor has: `O[q d] = softmax[x](Q * K) * V` with
    `Q[q d]`, `K[x d]` keeps `d` (it is on the left), so the softmax runs once per `d`, and
    `Y[t m] = gelu(X * W1) * W2` with `X[t m]`, `W1[m f]` keeps `m` (no linear layer: `f` is
    contracted once per `m`, on CUDA cores): the diagram means that, but a product of two arrays that each bring axes of their own and sum
    nothing looks like a contraction meant to sum `d`. (axes, product, softmax/reduction/
    contracting product) per
    case; an axis counts when it follows an axis of a factor's own in that factor's layout
    (`d` in `Q[q d]`; a leading batch axis, `b` in `q[b q] * k[b x]`, does not), and the
    product sums nothing (`Q[b q h d] * K[b x h d]` summing `d` keeps `h` by design, and so
    does `sum[d](Q * K)`, the sum written out).
    Elementwise products (`X * X` in a norm, `S * g[x]`, a gate) bring no axis of their own
    on one side and are never reported."""
    found = []
    # (node, the enclosing softmaxes, reductions and contractions with what each keeps of the
    # part holding the node: a softmax's or reduction's operand, a contraction's factor)
    stack: list[tuple[RNode, tuple]] = [(root, ())]
    while stack:
        node, outer = stack.pop()
        if node.kind in ("softmax", "reduce"):
            outer = outer + ((node, set(node.children[0].out)),)
        if node.contract:       # a contraction around it: `gelu(N2 * W1) * W2` keeping m
            stack.extend((c, outer + ((node, set(c.out) - set(node.contract)),))
                         for c in node.children)
            continue
        stack.extend((c, outer) for c in node.children)
        if not outer or node.kind != "map" or node.fn != "mul":
            continue
        a, b = (c.out for c in node.children)
        own_a, own_b = [x for x in a if x not in b], [x for x in b if x not in a]
        if not own_a or not own_b:
            continue                        # elementwise, or a scale: nothing of its own
        for norm, kept in reversed(outer):  # the innermost first
            along = set(norm.contract or norm.axes)
            if norm.kind == "reduce" and along & set(a) & set(b):
                break       # the contraction written out, `sum[d](Q * K)`: what it keeps is
                            # kept by design (the heads `h` of `Q[t h d]`, `K[s h d]`)
            if not along & set(own_a + own_b):
                continue
            axes = tuple(x for x in a if x in b and x in kept and x not in along
                         and (_follows_own(x, a, own_a) or _follows_own(x, b, own_b)))
            if axes:
                found.append((axes, node, norm))
                break
    return found


def _follows_own(axis: str, layout: tuple[str, ...], own: list[str]) -> bool:
    return any(layout.index(o) < layout.index(axis) for o in own)
