"""Syntax tree to typed graph IR: every check of the language, every error at once.

`build(program, overrides)` declares axes, inputs, outputs and hints, resolves
each equation (names, types, the einsum rule), emits its ops into a networkx
DiGraph, then checks what only the whole diagram shows (outputs exist, every
size can be determined) and warns about unused inputs and arrays.
"""

from __future__ import annotations

from .graph import DiGraph

from ..diagrams import ast, limits
from ..diagrams.diagnostics import Collector, Label, NapkinError, Span, did_you_mean, error, warning
from . import ir
from .declare import Declarations, check_axes_list, declare, dtype_of
from .einsum import across_functions, kept_under_normalisation, place_contractions
from .positions import check_exact, sized_axes
from .resolve import ArrayInfo, Poisoned, RNode, Scope, resolve, retype, split_positions


def build(program: ast.Program, overrides: dict[str, int] | None = None) -> tuple[DiGraph, list]:
    """Returns (graph IR, warnings); raises NapkinError with every error found."""
    errors = Collector(program.source, limits.MAX_ERRORS)
    decl = declare(program, dict(overrides or {}), errors)
    g = DiGraph()
    scope = Scope(axes=decl.axes, arrays={}, later=dict(decl.equations), poisoned=set(),
                  sizes=decl.sizes, arrays_anywhere=frozenset(decl.equations) |
                  {item.name.text for item in decl.inputs})
    inputs: dict[str, int] = {}
    declared: dict[int, ArrayInfo] = {}     # an input enters the scope at its `in` statement
    for item in decl.inputs:
        axes = tuple(a.text for a in item.axes)
        n = ir.add_node(g, ir.Input(item.name.text, item.dtype.text), ir.ArrayType(axes, item.dtype.text),
                        span=item.name.span)
        inputs[item.name.text] = n
        declared[id(item)] = ArrayInfo(item.name.text, axes, ir.kind_of_dtype(item.dtype.text),
                                       item.name.span, n)
        scope.later.setdefault(item.name.text, item.name.span)
        scope.later_inputs.add(item.name.text)
    failed_inputs = {n.text for s in program.statements if isinstance(s, ast.InputDecl)
                     for n in (i.name for i in s.items)} - set(inputs)
    scope.poisoned |= failed_inputs
    arrays = dict(inputs)
    equations = []
    notes: list = []
    for index, stmt in enumerate(program.statements):
        if isinstance(stmt, ast.InputDecl):
            for item in stmt.items:
                if id(item) in declared:
                    scope.later.pop(item.name.text, None)
                    scope.later_inputs.discard(item.name.text)
                    scope.arrays[item.name.text] = declared[id(item)]
        if not isinstance(stmt, ast.Equation):
            continue
        scope.later.pop(stmt.name.text, None)
        try:
            info = _equation(g, scope, stmt, index, notes)
        except Poisoned:
            scope.poisoned.add(stmt.name.text)
            continue
        except NapkinError as exc:
            scope.poisoned.add(stmt.name.text)
            errors.add(exc)
            continue
        arrays[stmt.name.text] = info.node
        equations.append(info)
        if g.number_of_nodes() > limits.MAX_NODES:
            errors.add(error("N0503", f"the diagram has over {limits.MAX_NODES:,} operations",
                             stmt.span, help="split the diagram into smaller ones"))
            errors.raise_if_any()
    outputs = _outputs(g, decl, arrays, scope.poisoned, errors)
    errors.raise_if_any()
    g.graph.update(
        source=program.source,
        axes=_axes(decl),
        inputs=inputs,
        outputs=outputs,
        arrays=arrays,
        hints=tuple(decl.hints),
        equations=tuple(equations),
        exact=tuple(scope.exact),
    )
    _check_sizes_known(g, decl, errors)
    static = {a: decl.sizes.size(a) for a in decl.axes if decl.sizes.size(a) is not None}
    try:
        check_exact(scope.exact, static)
    except NapkinError as exc:
        errors.add(exc)
    errors.raise_if_any()
    return g, notes + _unused(g, decl) + [w for e in equations for w in _broadcast_warnings(g, e)]


def _equation(g: DiGraph, scope: Scope, stmt: ast.Equation, index: int,
              notes: list) -> ir.EquationInfo:
    name = stmt.name
    if name.text in ir.BUILTINS:
        raise error("N0206", f"`{name.text}` is a built-in function and cannot name an array",
                    name.span, help="choose another name")
    if name.text in scope.axes:
        raise error("N0202", f"`{name.text}` names both an axis and an array", name.span,
                    labels=[Label(scope.axes[name.text], "the axis")], help="rename one of them")
    if name.text in scope.arrays:
        raise error("N0202", f"`{name.text}` is assigned twice", name.span,
                    labels=[Label(scope.arrays[name.text].span, "first defined here")],
                    help="every name is assigned once; give the new array its own name")
    scope.sized = sized_axes(stmt, scope, split_positions)
    root = resolve(stmt.expr, scope)
    if stmt.axes is None:
        order = tuple(dict.fromkeys(a for a in _occurrences(root) if a in root.free))
        raise error("N0205", f"`{name.text}` needs the axes that leave the box", name.span,
                    help=f"write `{name.text}[{' '.join(order)}] = ...` (in the layout you want; "
                         "drop the axes you mean to sum)")
    check_axes_list(stmt.axes, scope.axes, stmt.axes_span, f"the left-hand side of `{name.text}`",
                    scope.arrays_anywhere)
    lhs = tuple(a.text for a in stmt.axes)
    place_contractions(root, lhs)
    retype(root)
    for axis, node in across_functions(root):
        notes.append(warning(
            "N0704", f"`{axis}` is summed once over this whole product, including inside a "
            "function", node.op_span or node.span,
            help=f"if each product should contract `{axis}` on its own, rename it in one of them "
                 f"(e.g. `X[t n] * W[n f]`) or split the equation"))
    notes.extend(_kept_warning(axes, product, norm) for axes, product, norm
                 in kept_under_normalisation(root))
    result = _emit(g, root, index, lhs)
    vkind = root.vkind
    out = ir.ArrayType(lhs, ir.dtype_of_kind(vkind))
    storage = _storage(stmt, vkind)
    node = ir.add_node(g, ir.Assign(name.text, storage), out, [result], span=stmt.span, stmt=index)
    scope.arrays[name.text] = ArrayInfo(name.text, lhs, vkind, name.span, node)
    contracted, reduced, normalised = _summed(root)
    broadcast = tuple(a for a in lhs if a not in root.out)
    return ir.EquationInfo(name.text, lhs, contracted, reduced, normalised, broadcast, node,
                           stmt.span, index)


def _storage(stmt: ast.Equation, vkind: str) -> str | None:
    """The storage dtype an equation declares (`H[t f]: bf16 = ...`), checked as an output's
    is: a float in a float dtype or an integer dtype... never a float as an integer, never a
    boolean mask as a number (N0401, N0405, N0406); None when it declares none."""
    if stmt.dtype is None:
        return None
    name = stmt.name
    dtype = dtype_of(stmt.dtype, name, "storage")
    if vkind == "bool":
        raise error("N0405", f"`{name.text}` is a boolean mask and cannot be stored as {dtype}",
                    stmt.dtype.span, help="drop the dtype (a mask is kept as it is), or store "
                    f"a number: `{name.text}f[...] = where({name.text}, 1, 0)`")
    if vkind == "float" and dtype in ir.INT_DTYPES:
        raise error("N0406", f"`{name.text}` holds floating-point values and cannot be stored "
                    f"as {dtype}", stmt.dtype.span,
                    help="napkin never converts floats to integers silently: convert explicitly "
                         "with `int(...)` or `floor(...)`, or store it as f16, bf16 or f32")
    return dtype


def _occurrences(root: RNode):
    stack = [root]
    while stack:
        n = stack.pop()
        if n.kind in ("array", "index"):
            yield from n.axes
        stack.extend(reversed(n.children))


def _summed(root: RNode) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Axes contracted, reduced and normalised (softmax) anywhere in an equation."""
    found: dict[str, dict[str, None]] = {"contract": {}, "reduce": {}, "softmax": {}}
    stack = [root]
    while stack:
        n = stack.pop()
        found["contract"].update(dict.fromkeys(n.contract))
        if n.kind in ("reduce", "softmax"):
            found[n.kind].update(dict.fromkeys(n.axes))
        stack.extend(reversed(n.children))
    return tuple(found["contract"]), tuple(found["reduce"]), tuple(found["softmax"])


def _emit(g: DiGraph, node: RNode, stmt: int, lhs: tuple[str, ...]) -> int:
    """Add the ops of a resolved expression to the graph; returns the root's node id. An
    elementwise op over the axes the equation's left-hand side lists takes its layout:
    broadcasting orders axes as the operands first name them (`where(q >= x, S, -inf)` is
    [q x b h] for S[b h q x]), and an Assign that only reorders hides the op behind it
    from the analyses that look through names (a softmax's contraction: FlashAttention)."""
    args = [_emit(g, c, stmt, lhs) for c in node.children]
    out = ir.ArrayType(_layout(g, node, args, lhs), ir.dtype_of_kind(node.vkind))
    if node.kind == "const":
        return ir.add_node(g, ir.Const(node.value), out, span=node.span, stmt=stmt)
    if node.kind == "index":
        return ir.add_node(g, ir.Index(node.axes[0]), ir.ArrayType(node.out, "index"),
                           span=node.span, stmt=stmt)
    if node.kind == "size":
        return ir.add_node(g, ir.SizeOf(node.axes[0]), out, span=node.span, stmt=stmt)
    if node.kind == "array":
        base = node.node
        declared = ir.type_of(g, base)
        if node.children:           # a gather: the array, then an index per computed position
            return ir.add_node(g, ir.Gather(node.positions), ir.ArrayType(out.axes, declared.dtype),
                               [base] + args, span=node.span, stmt=stmt)
        if node.axes == declared.axes:
            return base
        view = ir.ArrayType(node.out, declared.dtype)
        return ir.add_node(g, ir.View(node.axes), view, [base], span=node.span, stmt=stmt)
    if node.kind == "map" and node.contract:
        return ir.add_node(g, ir.Contract(node.contract), out, args, span=node.span, stmt=stmt)
    if node.kind == "map":
        return ir.add_node(g, ir.Map(node.fn), out, args, span=node.span, stmt=stmt)
    if node.kind == "reduce":
        return ir.add_node(g, ir.Reduce(node.fn, node.axes), out, args, span=node.span, stmt=stmt)
    if node.kind == "scan":
        return ir.add_node(g, ir.Scan(node.fn, node.axes), out, args, span=node.span, stmt=stmt)
    assert node.kind == "softmax"
    return ir.add_node(g, ir.Softmax(node.axes), out, args, span=node.span, stmt=stmt)


def _layout(g: DiGraph, node: RNode, args: list[int], lhs: tuple[str, ...]) -> tuple:
    """The axes of an op in its equation (see _emit), in the order the IR's invariants give
    its operands' (compiler/verify.py), which an operand in the left-hand side's layout
    may have changed."""
    operands = [ir.type_of(g, a).axes for a in args]
    union = tuple(dict.fromkeys(a for axes in operands for a in axes))
    if node.kind == "map" and node.contract:
        return tuple(a for a in union if a not in node.contract)
    if node.kind == "map":
        return lhs if set(union) == set(lhs) else union
    if node.kind == "reduce":
        return tuple(a for a in operands[0] if a not in node.axes)
    if node.kind in ("softmax", "scan"):
        return operands[0]
    if node.kind == "array" and node.children:      # a gather: its positions' axes
        return ir.gather_axes(node.positions, operands)
    return tuple(node.out)


def _outputs(g: DiGraph, decl: Declarations, arrays: dict[str, int], poisoned: set[str],
             errors: Collector) -> dict[str, int]:
    outputs: dict[str, int] = {}
    first: dict[str, Span] = {}
    for item in decl.outputs:
        name = item.name.text
        try:
            if name in first:
                raise error("N0202", f"`{name}` is listed as an output twice", item.name.span,
                            labels=[Label(first[name], "first listed here")],
                            help="list each output once")
            first[name] = item.name.span
            dtype = dtype_of(item.dtype, item.name, "output")
            if name in poisoned:
                continue
            if name not in arrays:
                raise error("N0203", f"output `{name}` is not defined", item.name.span,
                            help=did_you_mean(name, arrays, "define it with an equation or "
                                              "declare it with `in`"))
            src = arrays[name]
            kind = ir.kind_of_dtype(ir.type_of(g, src).dtype)
            if kind == "bool":
                raise error("N0405", f"`{name}` is a boolean mask and cannot be stored as {dtype}",
                            item.name.span, help=f"store a number: `{name}f[...] = where({name}, 1, 0)`")
            if kind == "float" and dtype in ir.INT_DTYPES:
                raise error("N0406", f"`{name}` holds floating-point values and cannot be stored "
                            f"as {dtype}", item.name.span,
                            labels=[Label(g.nodes[src]["span"], f"`{name}` is computed here")],
                            help="napkin never converts floats to integers silently: convert "
                                 "explicitly with `int(...)` (toward zero) or `floor(...)`, or store "
                                 "it as f32")
            declared = ir.op(g, src).dtype if isinstance(ir.op(g, src), ir.Assign) else None
            if declared is not None and declared != dtype:
                raise error("N0405", f"`{name}` is declared {declared} but output as {dtype}",
                            item.name.span, labels=[Label(g.nodes[src]["span"],
                                                          f"`{name}` is declared {declared} here")],
                            help="give the array one dtype: the same in both places, or only "
                                 "in `out`")
            axes = ir.type_of(g, src).axes
            outputs[name] = ir.add_node(g, ir.Output(name, dtype), ir.ArrayType(axes, dtype), [src],
                                        span=item.span)
        except NapkinError as exc:
            errors.add(exc)
    if not decl.outputs:
        src = errors.source
        last = len(src.text.rstrip()) if src is not None else 0
        # (the end of the text; line 1, column 1 of an empty or blank one: a location always)
        end = None if src is None else src.span(max(last - 1, 0), last) if last else src.span(0, 0)
        errors.add(error("N0207", "the diagram declares no outputs", end,
                         help="add a line such as `out Y: f16`"))
    return outputs


def _axes(decl: Declarations) -> dict[str, ir.Axis]:
    return {name: ir.Axis(name, decl.sizes.size(name), decl.sizes.find(name), span)
            for name, span in decl.axes.items()}


def _check_sizes_known(g: DiGraph, decl: Declarations, errors: Collector) -> None:
    bound = {decl.sizes.find(a.text) for item in decl.inputs for a in item.axes}
    reported = set()
    for n in ir.order(g):
        data = g.nodes[n]
        axes = list(data["type"].axes)
        op = data["op"]
        if isinstance(op, (ir.SizeOf, ir.Index)):
            axes.append(op.axis)
        for axis in axes:
            rep = decl.sizes.find(axis)
            if decl.sizes.size(axis) is None and rep not in bound and axis not in reported:
                reported.add(axis)
                errors.add(error(
                    "N0305", f"the size of axis `{axis}` cannot be determined", data["span"],
                    labels=[Label(decl.axes[axis], "declared without a size")],
                    help=f"no input has `{axis}`: give it a size (`axis {axis} = N`) or -D {axis}=N"))


def _unused(g: DiGraph, decl: Declarations) -> list:
    found = []
    for n in ir.order(g):
        op = ir.op(g, n)
        if g.out_degree(n):
            continue
        if isinstance(op, ir.Input):
            found.append(warning("N0701", f"input `{op.name}` is never used", g.nodes[n]["span"],
                                 help="remove it, or use it in an equation"))
        elif isinstance(op, ir.Assign):
            span = g.nodes[n]["span"]
            found.append(warning("N0702", f"`{op.name}` is computed but never used", span,
                                 help=f"add `out {op.name}: f32`, or remove the equation"))
    return found


def _broadcast_warnings(g: DiGraph, info: ir.EquationInfo) -> list:
    if not info.broadcast:
        return []
    axes = ", ".join(f"`{a}`" for a in info.broadcast)
    return [warning("N0703", f"`{info.name}` does not depend on {axes}: it is repeated along it",
                    info.span, help="remove the axis from the left-hand side if that is a typo")]


def _fresh(axes: tuple[str, ...]) -> list[str]:
    return [f"{x}2" for x in axes]


def _renamed(factor: RNode, axes: tuple[str, ...]) -> str:
    """`N2[b t m2]`: a factor with the kept axes renamed (`X` for a subexpression)."""
    if not factor.array:
        return "..."
    return f"{factor.array}[{' '.join(x + '2' if x in axes else x for x in factor.out)}]"


def _kept_warning(axes: tuple[str, ...], product: RNode, norm: RNode):
    """N0705: a product keeps an axis both factors carry, then a softmax, a reduction or a
    contraction in the same statement runs along another axis once per position of it (the
    einsum trap)."""
    a, b = product.children
    factors = f"`{a.array}` and `{b.array}`" if a.array and b.array else "both factors"
    shown = ", ".join(f"`{x}`" for x in axes)
    one = shown if len(axes) == 1 else "(" + ", ".join(axes) + ")"
    own = [x for x in a.out + b.out if x not in axes]
    scores = f"S[{' '.join(dict.fromkeys(own))}] = {a.array} * {b.array}" if a.array and b.array \
        else f"S[{' '.join(dict.fromkeys(own))}] = ..."
    if norm.contract:       # a contraction around the product (an MLP's `gelu(X * W1) * W2`)
        summed = ", ".join(f"`{x}`" for x in norm.contract)
        return warning(
            "N0705", f"{shown} {'is' if len(axes) == 1 else 'are'} shared by {factors} in this "
            f"product but kept (it is on the left), so the product sums nothing and {summed} is "
            f"contracted separately for each {one}",
            product.op_span or product.span,
            labels=[Label(norm.op_span or norm.span, f"contracts {summed} once per {one}")],
            help=f"to sum {shown} in the product (a linear layer), compute it in its own equation "
                 f"(`{scores.replace('S[', 'H[', 1)}`, inside its function) or rename {shown} "
                 f"in the product (`{_renamed(a, axes)} * {_renamed(b, axes)}`, with "
                 f"`axis {' '.join(_fresh(axes))}`); to keep {one} on purpose, compute the "
                 "product in its own equation")
    fn = f"{norm.fn}[{' '.join(norm.axes)}]"
    verb = "normalises" if norm.kind == "softmax" else "reduces"
    return warning(
        "N0705", f"{shown} {'is' if len(axes) == 1 else 'are'} shared by {factors} in this "
        f"product but kept, so `{fn}` {verb} separately for each {one}",
        product.op_span or product.span,
        labels=[Label(norm.op_span or norm.span, f"one `{norm.fn}` per {one}")],
        help=f"to sum {shown} in the product (as attention's scores do), compute it in its own "
             f"equation (`{scores}`) or write `sum[{' '.join(axes)}](...)` around it; to keep "
             f"one `{norm.fn}` per {one} on purpose, compute the product in its own equation")
