"""Sums of a chain's chunk values, added across blocks (chain.ChainSite.sums).

A chain (chain.py) holds every chunk value T[batch.. row red] in registers, element by
element. A stored sum of such a value over some of the chunk's axes comes out of the same
kernel:

    R[kept..] = sum over axes of T[batch.. row red]      axes <= batch | {row, red}

The gradient of an attention bias, dB[h q x] = sum[b](dS), and of a learned ALiBi slope,
dslope[h] = sum[q x](sum[b](-dS) * (q - x)), are the examples: with no S stored and no
second recomputation of dS (FlashAttention's dbias). Sums nested through factors that do
not vary along the inner sum's axes (`sum[b](X) * (q - x)`, a negation, a division of
it) are one sum over all their axes of the inner expression (`Summed.inner`: evaluated at
each element with the inner sums read as their operands).

Each block adds its share into an f32 scratch with atomics (as the products over the rows,
chain.Across, and converted by the same kernel after it): where R keeps the chunk's rows
and streamed axis, one add per element of the chunk (dB: every block of the batch axes adds
its tile); where it keeps neither, the block's elements summed in registers over all its
chunks, then over the warp by shuffles, one add per warp (dslope); where it keeps the rows
only, per lane and row, one add per lane and row after the chunks. A sum keeping the streamed
axis but not the rows (a column sum of the chunk across warps) is not lowered.

The model (tensorcore.for_site) holds the summed batch axes and rows woven and counts the
stores among Model.across (4 bytes an add, at the `[l2] atomics` rate; compiler/added.py),
in Model.sums so that no chunk tile is staged for them and their issue slots are an add
each, not a product's.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ir
from .values import through

LINEAR = ("mul", "neg", "div")      # maps through which an inner sum is pulled out


@dataclass(frozen=True)
class Summed:
    node: int               # the stored sum R (a Reduce of fn sum)
    t: int                  # its operand: a value of the chunk
    axes: tuple[str, ...]   # the chunk's axes R keeps (of batch, row, red)
    store: int              # R's stored node (through names: the sum)
    inner: tuple[int, ...] = ()   # sums nested in t, read at each element as their operand


def candidates(g, kernel) -> dict[int, tuple[int, ...]]:
    """The kernel's stored sums and the sums nested in them (`Summed.inner`), by the stored
    sum: every Reduce of the kernel that is one of those is a chain's sum, not a streamed
    reduction."""
    stored = {through(g, m): m for m in kernel.stores}
    members = set(kernel.nodes)
    out = {}
    for n, _ in stored.items():
        op = ir.op(g, n)
        if n not in members or not isinstance(op, ir.Reduce) or op.fn != "sum":
            continue
        out[n] = tuple(_inner(g, ir.operands(g, n)[0], members, set(stored)))
    return out


def _inner(g, n: int, members: set, stored: set) -> list[int]:
    """The sums nested linearly in n (through products, negations and divisions whose other
    operands do not vary along the sum's axes): the sums pulled out of the expression."""
    if n not in members:
        return []
    op = ir.op(g, n)
    if isinstance(op, ir.Assign):
        return _inner(g, ir.operands(g, n)[0], members, stored)
    if isinstance(op, ir.Reduce) and op.fn == "sum" and n not in stored and \
            all(m in members for m in g.successors(n)) and len(list(g.successors(n))) == 1:
        return [n] + _inner(g, ir.operands(g, n)[0], members, stored)
    if not (isinstance(op, ir.Map) and op.fn in LINEAR):
        return []
    args = ir.operands(g, n)
    found = []
    for i, m in enumerate(args):
        if op.fn == "div" and i > 0:
            break
        sums = _inner(g, m, members, stored)
        others = [o for j, o in enumerate(args) if j != i]
        if sums and all(not set(ir.op(g, s).axes) & set(ir.type_of(g, o).axes)
                        for s in sums for o in others):
            found += sums
    return found


def examine(g, kernel, nested: dict, row: str, red: str, batch) -> tuple[Summed, ...] | str:
    """The stored sums as the chain lowers them, or why not: every summed axis and every
    kept one of the chunk's axes, the operand (inner sums read as theirs) over them only."""
    chunk = set(batch) | {row, red}
    out = []
    for n, inner in nested.items():
        summed = set(ir.op(g, n).axes).union(*(ir.op(g, s).axes for s in inner))
        kept = ir.type_of(g, n).axes
        if not summed <= chunk or not set(kept) <= chunk:
            return "a stored sum runs over other axes than the chunk's"
        if red in kept and row not in kept:
            return f"a stored sum keeps `{red}` but not the rows (column sums are not lowered)"
        store = next(m for m in kernel.stores if through(g, m) == n)
        out.append(Summed(n, ir.operands(g, n)[0],
                          tuple(a for a in kept if a in (row, red)), store, inner))
    return tuple(out)


def grid(g, site) -> tuple[str, ...]:
    """The chain's rows and batch axes whose blocks add their shares across (the grid's,
    reduced by no block): the rows of its products over them (chain.Across), and those its
    sums add over."""
    summed = set().union(*(ir.op(g, s.node).axes for s in site.sums),
                         *(ir.op(g, i).axes for s in site.sums for i in s.inner))
    return tuple(dict.fromkeys(((site.row,) if site.across else ()) + tuple(
        a for a in (site.row,) + site.batch if a in summed)))


__all__ = ["Summed", "candidates", "examine", "grid"]
