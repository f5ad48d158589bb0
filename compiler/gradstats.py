"""The statistics a gradient reads (`compiler/grad.py`): for every softmax its row logsumexp,
and FlashAttention's row term `D = sum[d](dO * O)` where the softmax feeds one contraction
into an output. With `saved` they are extra inputs of the backward (the forward's
`napkin.statistics` gives them); without, equations of the backward itself, before the
probabilities that read them."""

from __future__ import annotations

from .graph import DiGraph

from . import ir
from .gradtext import product, strip


def plan_statistics(sw, active: set, cotangent: dict[int, str]) -> None:
    """Each softmax's row logsumexp (a saved input, or an equation before the probabilities),
    and FlashAttention's row term where the softmax feeds one contraction into an output."""
    g = sw.g
    for n in ir.order(g):
        op = ir.op(g, n)
        if not isinstance(op, ir.Softmax) or n not in active:
            continue
        holder = sw.alias.get(n, n)
        lse = sw.fresh(f"{sw.names.get(holder, f't{n}')}_lse")
        row = tuple(a for a in sw.axes(n) if a not in op.axes)
        over = " ".join(op.axes)
        x = sw.value(ir.operands(g, n)[0])
        if sw.saved:
            sw.extra_inputs.append((lse, row, "f32"))
            sw.sources[lse] = lse
        else:
            sw.before.setdefault(holder, []).append(f"{lse}[{' '.join(row)}] = logsumexp[{over}]({strip(x)})")
        sw.lse[n] = lse
        # P feeds only one contraction over the softmax axes, whose result feeds only an
        # output: then sum[x](dP * P) = sum[d](dO * O), with O the saved output.
        users = list(g.successors(holder))
        if len(users) != 1 or not isinstance(ir.op(g, users[0]), ir.Contract) or \
                set(ir.op(g, users[0]).axes) != set(op.axes):
            continue
        c = users[0]
        c_holder = sw.alias.get(c, c)
        outs = list(g.successors(c_holder))
        if not same_axes(g, c_holder, c):
            continue
        if len(outs) != 1 or not isinstance(ir.op(g, outs[0]), ir.Output):
            # O read by the rest of the diagram (a block's `A`, projected by Wo): its
            # cotangent is computed, D = sum[d](dO * O) from it once swept (grad.py)
            sw.inner[n] = (c, row, tuple(a for a in sw.axes(c) if a not in sw.axes(n)))
            continue
        out = outs[0]
        if sw.saved:
            o = sw.fresh(f"{ir.op(g, out).name}_saved")
            sw.extra_inputs.append((o, sw.axes(out), ir.op(g, out).dtype))
            sw.sources[o] = ir.op(g, out).name
        else:       # the forward's output again, its softmax online (one FlashAttention pass)
            o = sw.names[c_holder] if c_holder in sw.names else sw.fresh(ir.op(g, out).name)
            a, b = ir.operands(g, c)
            text = lambda m: f"softmax[{over}]({strip(x)})" if m == holder else sw.value(m)  # noqa: E731
            o_text = product(text(a), sw.axes(a), text(b), sw.axes(b), sw.axes(c)).text
            sw.first.append(f"{o}[{' '.join(sw.axes(c))}] = {strip(o_text)}")
        other = " ".join(a for a in sw.axes(c) if a not in sw.axes(n))
        term = f"sum[{other}]({cotangent[out]} * {o})" if other else f"{cotangent[out]} * {o}"
        sw.row[n] = (sw.fresh("D"), row, term)


def same_axes(g: DiGraph, a: int, b: int) -> bool:
    return set(ir.type_of(g, a).axes) == set(ir.type_of(g, b).axes)
