"""The gradient of a diagram as another diagram (reverse mode on the checked IR).

`gradient_text(d, wrt)` returns the `.napkin` text of the backward diagram: its
inputs are the forward's inputs followed by one cotangent `d<OUT>` per output (in
the output's dtype); its outputs are `d<IN>` for each differentiated input, in that
input's dtype. The forward values the rules need are recomputed by equations copied
from the forward (as the user wrote them, so they fuse the same way); each rule is
in `compiler/derivatives.py` (elementwise) or below (contractions, reductions,
softmax, views, gathers as masked sums, scans). The text goes through the ordinary front end, so the result is a
checked diagram like any other, which the same planner fuses and tiles.

With `saved=True` the backward also takes, for every softmax, the row logsumexp
of its argument (`<P>_lse`, which `statistics.statistics_text` adds to the forward as an extra
output) and recomputes the probabilities from it elementwise, `exp(S - lse)`,
instead of normalising rows again; and where a softmax feeds one contraction (`O =
P * V`), the row term `sum[x](dP * P)` becomes `sum[d](dO * O)` with O a saved
output, as FlashAttention-2's backward computes it: no N x N array is reduced twice.

Without `saved` the backward computes the same statistics itself, as equations before its
first use: `P_lse = logsumexp[x](S)`, and for the one-contraction case the forward's output
again, `O = softmax[x](S) * V`, so D is `sum[d](dO * O)`. The probabilities are then
elementwise in S and a row vector, which the planner recomputes in every kernel that needs
them (FlashAttention's backward with its forward run again), instead of a row-normalised
N x N array that only one kernel can produce.
"""

from __future__ import annotations

from .graph import ancestors, descendants

from ..diagrams.diagnostics import did_you_mean, error
from . import ir
from .derivatives import linear, partials
from .canonical import softmaxes
from .diagram import Diagram
from .gradpositions import ungather, unscan, unview
from .gradstats import plan_statistics, same_axes
from .gradsweep import ELEMENTWISE, Sweep
from .reach import normalised
from .cotangents import cotangent_line
from .gradtext import Expr, header, product, reduce_to, strip

_KEYWORDS = {"axis", "in", "out", "group", "stream", "split", "by", "at", "and", "or", "not", "inf", "size"}


def gradient_text(d: Diagram, wrt: tuple[str, ...] | None = None, saved: bool = False) -> str:
    """The backward diagram of `d` as napkin text (see the module docstring)."""
    sw, active, wrt, cotangents = _setup(d, wrt, saved)
    g = sw.g
    grads: dict[int, list[Expr]] = {}
    for (c, _, _), n in zip(cotangents, _floating(g).values()):
        if n in active:
            grads.setdefault(n, []).append(Expr(c, frozenset(sw.axes(n)), layout=sw.axes(n)))
    for n in reversed(ir.order(g)):
        if n not in grads or isinstance(ir.op(g, n), ir.Input):
            continue
        op = ir.op(g, n)
        label = sw.names.get(n) if isinstance(op, (ir.Assign, ir.Input)) else None
        gr = sw.total(n, grads.pop(n), f"d{label}" if label else f"g{n}",
                      force_name=isinstance(op, (ir.Assign, ir.View, ir.Gather, ir.Scan)),
                      layout=_result_layout(sw, n))
        sw.cotangent[n] = gr.text
        for a, part in _rule(sw, n, gr, active):
            if part is not None:
                grads.setdefault(a, []).append(reduce_to(part, sw.axes(a)))
    results = []
    for name in wrt:
        n = g.graph["inputs"][name]
        gr = sw.total(n, grads[n], f"d{name}", force_name=True, own=True)
        results.append((gr.text, ir.op(g, n).dtype))
    lines = header(sw.g, f"The gradient of {d.name}, derived by `napkin grad` (reverse mode on the checked IR).",
                    cotangent_line([c for c, _, _ in cotangents])
                    + (" and the saved statistics." if sw.extra_inputs else ".")
                    + _hints_left(d), sw.new_axes)
    for name, axes, dtype in cotangents + sw.extra_inputs:
        lines.append(f"in {name}[{' '.join(axes)}]: {dtype}")
    lines += ["", *_forward(sw), *sw.first, "", *sw.equations, ""]
    lines.append("out " + ", ".join(f"{name}: {dtype}" for name, dtype in results))
    return "\n".join(lines) + "\n"


def differentiated(d: Diagram, wrt: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The inputs the gradient differentiates, in the order of its outputs (`d<IN>`, or
    `d<IN>_` where a name is taken): `wrt` checked (N0810), or every floating-point input
    some output depends on."""
    return _wrt(d, softmaxes(d.ir), wrt)[0]


def _wrt(d: Diagram, g, wrt):
    inputs, outputs = g.graph["inputs"], g.graph["outputs"]
    floats = [name for name, n in inputs.items() if ir.op(g, n).dtype in ir.FLOAT_DTYPES]
    # gradients flow through floats only: not into a `where`'s condition, a comparison or an
    # integer (a position, argmax, int(...))
    numbers = g.subgraph(n for n in g.nodes if ir.kind_of_dtype(ir.type_of(g, n).dtype) == "float")
    reach = {name: descendants(numbers, inputs[name]) for name in floats}
    out_nodes = set(outputs.values())
    if wrt is None:
        wrt = tuple(name for name in floats if reach[name] & out_nodes)
    elif not wrt:
        raise error("N0810", "--wrt names no input", help="inputs: " + ", ".join(
            floats) if floats else None)
    twice = next((name for k, name in enumerate(wrt) if name in wrt[:k]), None)
    if twice is not None:       # (a slip, as `--wrt Q,Q` for `--wrt Q,K` may be)
        once = ",".join(dict.fromkeys(wrt))
        raise error("N0810", f"--wrt names `{twice}` twice", help=f"name each input once: "
                    f"--wrt {once} (inputs: {', '.join(floats)})")
    for name in wrt:
        if name not in inputs:
            raise error("N0810", f"`{name}` is not an input of {d.name}",
                        help=did_you_mean(name, inputs, "inputs: " + ", ".join(inputs))
                        if inputs else None)
        if name not in floats:
            raise error("N0810", f"`{name}` is not a floating-point input: it has no gradient",
                        help=_differentiable(floats, reach, out_nodes))
        if not reach[name] & out_nodes:
            raise error("N0810", f"no output of {d.name} depends differentiably on `{name}`: its "
                        "gradient is zero (it reaches the outputs, if at all, only through "
                        "integers, comparisons or conditions)", help="leave it out of --wrt")
    if not wrt:
        raise error("N0810", f"no output of {d.name} depends differentiably on a floating-point "
                    "input: there is nothing to differentiate",
                    help="a gradient flows through floating-point values only, not through "
                         "`int(...)`, `floor`, comparisons, conditions or positions")
    return wrt, numbers, reach


def _hints_left(d: Diagram) -> str:
    """The subtitle's note on the forward's schedule hints: not carried into the gradient."""
    if not d.hints:
        return ""
    said = "; ".join(f"{h.kind} {h.axis} by {h.size}" + (f" at {h.level}" if h.level else "")
                     for h in d.hints)
    return (f"\n# The forward's hints ({said}) are not carried over: the gradient's kernels "
            "are planned on their own; add hints below to fix their schedule.")


def _differentiable(floats, reach, out_nodes) -> str:
    usable = [name for name in floats if reach[name] & out_nodes]
    return ("differentiable inputs: " + ", ".join(usable)) if usable else \
        "no input of this diagram has a gradient"


def _setup(d: Diagram, wrt, saved: bool):
    g = softmaxes(d.ir)      # a softmax written out differentiates as softmax (canonical.py)
    inputs, outputs = g.graph["inputs"], g.graph["outputs"]
    wrt, numbers, reach = _wrt(d, g, wrt)
    sw = Sweep(g, saved)
    sw.taken |= set(g.graph["axes"]) | set(g.graph["arrays"]) | set(inputs) | set(outputs) | _KEYWORDS \
        | ir.BUILTINS
    for name, n in inputs.items():
        sw.names[n] = name
        sw.loaded[name] = sw.axes(n)
    for n in g.nodes:
        op = ir.op(g, n)
        if isinstance(op, ir.Assign):
            sw.names[n] = op.name
            o = ir.operands(g, n)[0]
            if not isinstance(ir.op(g, o), ELEMENTWISE + (ir.Input,)) and same_axes(g, n, o) \
                    and g.out_degree(o) == 1:
                sw.alias[o] = n
    # an integer output (argmax, a position) passes no gradient back: it has no cotangent
    floating = _floating(g)
    active = set().union(*(reach[name] | {inputs[name]} for name in wrt)) & \
        set().union(*(ancestors(numbers, o) | {o} for o in floating.values()))
    cotangents, cotangent = [], {}
    for name, n in floating.items():
        c = cotangent[n] = sw.fresh(f"d{name}")
        cotangents.append((c, sw.axes(n), ir.op(g, n).dtype))
        sw.loaded[c] = sw.axes(n)
    plan_statistics(sw, active, cotangent)
    return sw, active, wrt, cotangents


def _floating(g) -> dict[str, int]:
    """The outputs a gradient flows back from: the floating-point ones, by name."""
    return {name: n for name, n in g.graph["outputs"].items()
            if ir.kind_of_dtype(ir.type_of(g, n).dtype) == "float"}


def _forward(sw: Sweep) -> list[str]:
    """The forward equations the text reads, and what they read, in forward order."""
    g = sw.g
    texts: dict[int, str] = {}
    todo = set(sw.needed)
    while todo:
        n = todo.pop()
        if n in texts or isinstance(ir.op(g, n), ir.Input):
            continue
        before = set(sw.needed)
        texts[n] = sw.definition(n)
        todo |= sw.needed - before
    def declared(n: int) -> str:       # a forward array's declared storage dtype, kept
        from .model import storage_dtype
        named = [m for m in [n, *g.successors(n)] if isinstance(ir.op(g, m), ir.Assign)
                 and ir.op(g, m).dtype is not None]
        return f": {storage_dtype(g, n)}" if named else ""
    return [line for n in ir.order(g) if n in texts and n not in sw.alias
            for line in (*sw.before.get(n, ()),
                         f"{sw.names[n]}[{' '.join(sw.axes(n))}]{declared(n)} = {strip(texts[n])}")]


def _rule(sw: Sweep, n: int, gr: Expr, active: set):
    """(operand, contribution) pairs: the local rule of node n applied to its cotangent."""
    g = sw.g
    op, args = ir.op(g, n), ir.operands(g, n)
    axes = lambda m: sw.axes(m)          # noqa: E731
    if isinstance(op, (ir.Assign, ir.Output)):
        return [(args[0], gr)]
    if isinstance(op, ir.Map):
        used: set[int] = set()        # the forward values a partial's text reads: its axes

        def use(m: int) -> str:
            used.add(m)
            return sw.value(m)
        thunks = partials(op.fn, lambda i: use(args[i]), lambda: use(n), gr.text)
        out = []
        for i, (a, thunk) in enumerate(zip(args, thunks)):
            if thunk is None or a not in active:
                continue
            used.clear()
            text, mask, mask_axes = thunk(), gr.mask, gr.mask_axes
            if op.fn == "where":        # the branch's own condition; the cotangent is 0 elsewhere
                c = sw.value(args[0]) if i == 1 else f"(not {sw.value(args[0])})"
                mask = f"({mask} and {c})" if mask else c
                mask_axes = mask_axes | set(axes(args[0]))
            elif mask and not linear(sw.g, op.fn, args, i):
                text = f"where({mask}, {text}, 0)"   # a NaN the forward makes outside the mask stays there
                used.add(-1)
            # the axes the text has: a cotangent broadcast along an axis (the operand of a
            # sum) does not have it, and summing it later would be a sum along no axis
            present = set(gr.axes).union(*(axes(m) for m in used if m >= 0))
            present |= mask_axes if -1 in used else set()
            out.append((a, Expr(text, frozenset(present), gr.sums, mask,
                                 gr.layout if text == gr.text else (), frozenset(mask_axes),
                                 over=frozenset(axes(n)) | frozenset(present))))
        return out
    if isinstance(op, ir.Contract):
        a, b = args
        out = []
        for mine, other in ((a, b), (b, a)):
            if mine in active:
                ov = sw.value(other)
                # a factor that is more than a name is named, so the sum is a plain product
                # (no N0704: the summed axis is not inside a function)
                g_ = sw.plain(gr.text, gr.axes, f"g{n}", _result_layout(sw, n))
                o_ = sw.plain(ov, axes(other), f"g{n}")
                # FlashAttention's chains compute the scores' cotangent and the probabilities
                # in the kernel: no product reads them through a reshape (_one_run)
                inside = {g_} if normalised(g, n) else set()
                inside |= {o_} if _softmax(g, other) else set()
                out.append((mine, _contribution(sw, n, mine, g_, tuple(gr.axes), o_, axes(other),
                                                inside)))
        return out
    if isinstance(op, ir.Reduce):
        x = args[0]
        over = " ".join(op.axes)
        if op.fn == "sum":
            return [(x, gr)]
        if op.fn == "mean":
            count = " * ".join(f"size({a})" for a in op.axes)
            return [(x, Expr(f"({gr.text} / ({count}))", gr.axes, gr.sums))]
        xv, yv = sw.value(x), sw.value(n)
        if op.fn in ("max", "min"):
            hit = f"({xv} == {yv})"
            t = f"(where({hit}, {gr.text}, 0) / sum[{over}](where({hit}, 1, 0)))"
        elif op.fn == "logsumexp":
            t = f"({gr.text} * where({xv} > -inf, exp({xv} - {yv}), 0))"
        else:  # pragma: no cover - var exists only after canonicalisation
            raise AssertionError(op.fn)
        return [(x, Expr(t, frozenset(axes(x)), gr.sums))]
    if isinstance(op, ir.Softmax):
        x = args[0]
        y = sw.value(n)
        if n not in sw.row and n in sw.inner and \
                sw.cotangent.get(sw.inner[n][0], "").isidentifier():
            # the one contraction's cotangent dO, named: D = sum[d](dO * O) with O the
            # forward's value, as for an output (gradstats.py)
            c, row_axes, other = sw.inner[n]
            o = sw.value(sw.alias.get(c, c))
            dot = f"{sw.cotangent[c]} * {o}"
            sw.row[n] = (sw.fresh("D"), row_axes, f"sum[{' '.join(other)}]({dot})" if other else dot)
        if n in sw.row:     # the saved form, named once: FlashAttention's D
            name, row_axes, text = sw.row.pop(n)
            sw.equations.append(f"{name}[{' '.join(row_axes)}] = {text}")
            sw.row[n] = (name, row_axes, text)
            row = name
        else:
            row = f"sum[{' '.join(op.axes)}]({gr.text} * {y})"
        return [(x, Expr(f"({y} * ({gr.text} - {row}))", frozenset(axes(x)), gr.sums))]
    if isinstance(op, ir.View):
        return [(args[0], unview(sw, args[0], op.labels, n, gr))]
    if isinstance(op, ir.Gather):
        return [(args[0], ungather(sw, n, gr))] if args[0] in active else []
    if isinstance(op, ir.Scan):
        return [(args[0], unscan(sw, n, gr))]
    return []


def _contribution(sw: Sweep, n: int, mine: int, g_: str, g_axes, o_: str, o_axes,
                  inside=frozenset()) -> Expr:
    """The product of a cotangent and the other factor, over the axes `mine` has. Where it
    sums several axes both factors have (dK of grouped-query attention: the query heads r
    and the queries q), it is a named partial over the last declared of them, kept along the
    others, and then a sum over those (FlashAttention-2's GQA backward: dK per query head,
    then summed): a kernel can stream one axis through the tensor cores, and fusion may still
    merge the two statements into one reduction over all of them.
    Where each factor is a backward input, a named cotangent or a copied forward value and
    those axes are one run, adjacent and in one order in both (dWo[h d m] = dR[b t m] *
    A[b t h d], summing b t; `dV[b s h d] * Wv[m h d]`, summing h d, its layout chosen so:
    _result_layout), it is one product: local_merge.py reads the run as one axis (a reshape
    of a stored array), one tensor-core product with no partial stored (canonical.py hoists
    no factor of N1 out of `dWq = dQ * N1` there). (`inside`: GQA's P and dS keep the
    partial, FlashAttention's backward computes them in the kernel, where no reshape reads
    them.)"""
    mine_axes = sw.axes(mine)
    shared = [a for a in sw.g.graph["axes"]
              if a in set(g_axes) & set(o_axes) and a not in mine_axes]
    if len(shared) < 2 or _one_run(sw, shared, inside, g_, o_):
        return product(g_, g_axes, o_, o_axes, mine_axes)
    rest = shared[:-1]
    kept = tuple(a for a in sw.g.graph["axes"] if a in set(mine_axes) | set(rest))
    label = sw.names.get(mine)
    partial = sw.named(product(g_, g_axes, o_, o_axes, kept),
                       f"d{label}_{''.join(rest)}" if label else f"g{n}", kept)
    return Expr(f"sum[{' '.join(rest)}]({partial.text})", frozenset(mine_axes))


def _one_run(sw: Sweep, axes, inside, *names: str) -> bool:
    """Whether each name is a backward input, a named cotangent or a copied forward value
    (none in `inside`) whose layout holds `axes` adjacent, all in one order."""
    runs = set()
    for name in names:
        layout = None if name in inside else sw.layout_of(name)
        if layout is None or not set(axes) <= set(layout):
            return False
        at = sorted(layout.index(a) for a in axes)
        if at[-1] - at[0] != len(at) - 1:
            return False
        runs.add(layout[at[0]:at[-1] + 1])
    return len(runs) == 1


def _result_layout(sw: Sweep, n: int) -> tuple[str, ...] | None:
    """The layout of a contraction's result cotangent (n the contraction or the statement
    naming it) that its two products read as runs: dY of `Y = X1 * X2` gives `dX1 = dY * X2`
    summing the axes Y has and X1 lacks, `dX2 = dY * X1` those X2 lacks; each set, where X2
    (X1) holds it adjacent, is laid out adjacent in that order, at its first axis's place in
    Y (`dV[b s h d]` of `V[b h s d] = N1[b s m] * Wv[m h d]`), so both are one product over
    a run (_contribution, local_merge.py). None where nothing moves (or n is no such value);
    the scores' cotangent keeps its layout (FlashAttention's chains compute it in the
    kernel)."""
    g = sw.g
    c = ir.operands(g, n)[0] if isinstance(ir.op(g, n), ir.Assign) else n
    if not isinstance(ir.op(g, c), ir.Contract) or normalised(g, c):
        return None
    y = sw.axes(n)
    runs = []
    for mine, other in ((sw.axes(a), sw.axes(b)) for a, b in (ir.operands(g, c),
                                                               ir.operands(g, c)[::-1])):
        run = tuple(a for a in other if a in set(y) - set(mine))
        at = [other.index(a) for a in run]
        if len(run) > 1 and at[-1] - at[0] == len(run) - 1:
            runs.append(run)
    out: list[str] = []
    for a in y:
        if a not in out:
            out.extend(next((r for r in runs if a in r), (a,)))
    return tuple(out) if tuple(out) != y else None


def _softmax(g, n: int) -> bool:
    """Whether n is a softmax's probabilities (through names)."""
    while isinstance(ir.op(g, n), ir.Assign):
        n = ir.operands(g, n)[0]
    return isinstance(ir.op(g, n), ir.Softmax)
