"""Packed fragment rows: attention's rows over several axes of Q at once (GQA's r x q).

Grouped-query attention `Q[b g r q d]`, `K[b g x d]` has two axes of Q that K and V lack:
the `r` query heads sharing a key-value head and the `q` queries of each. A FlashAttention
block whose rows run along one of them holds one position of the other, and every block of
a (b, g) group reads all of K and V again; with few queries (decoding, speculative decoding
q = 2..8) most of the 16 rows of a fragment are padding. Packed (FlashAttention-3's and
FlashDecoding's "pack GQA"), the block's rows are the flattened product `r x q`: row i is
(r, q) = (i / size(q), i % size(q)), so each chunk of K and V is read once for all of them.

The decision is made once, in `flash.examine` (`FlashSite.packed`), at the planning sizes:
the axis the rows would run along is shorter than a fragment and another axis of Q's rows
(absent from K and V) is longer than one. The planner and the cost model see the packed
rows as one axis (`name`, of size the product: `sized`, `relabel`); the lowering addresses
Q and O per row through the decomposition (codegen/mma.py `_checked_point`, tiles.py).
The packed axes must be adjacent and in the same order in Q and O (a row's offset is then
`i * stride`: Q's tile copy steps along the rows by a constant), and no value of the kernel
may read some of them without the others (a mask over q alone, causal decoding: the
block's span of q positions is no interval of its rows; those keep one axis of rows).
"""

from __future__ import annotations

import math
from dataclasses import replace

from . import ir

FRAG_ROWS = 16      # rows of an mma.sync fragment


def name(rows: tuple[str, ...]) -> str:
    """The fragment rows' axis: the one axis, or the packed axes' `(r q)` (a name no axis of
    a diagram has; the formulas print it as the product it is)."""
    return rows[0] if len(rows) == 1 else f"({' '.join(rows)})"


def parts(axis: str) -> tuple[str, ...]:
    """The axes a fragment rows' axis runs along (`name`'s inverse)."""
    return tuple(axis[1:-1].split(" ")) if axis.startswith("(") else (axis,)


def fragment_rows(g, kernel, own_q, q: int, out: int, sizes) -> tuple[str, ...]:
    """The axes the fragment rows run along: Q's own axis nearest O's contiguous end, unless it
    is shorter than a fragment at the planning sizes and another is longer (decode with GQA:
    the query heads `r` of one key-value head fill the rows where `q` is 1); packed with the
    other axes of Q's rows where one of them is longer than 1 and `why_not` finds no reason
    against it."""
    o_axes = ir.type_of(g, out).axes
    one = max(own_q, key=lambda a: (min((sizes or {}).get(a, FRAG_ROWS), FRAG_ROWS),
                                    o_axes.index(a)))
    if sizes is None or sizes.get(one, FRAG_ROWS) >= FRAG_ROWS or \
            not any(sizes.get(a, 1) > 1 for a in own_q if a != one):
        return (one,)
    rows = tuple(sorted(own_q, key=o_axes.index))
    return (one,) if why_not(g, kernel, rows, q, out) else rows


def why_not(g, kernel, rows: tuple[str, ...], q: int, out: int) -> str | None:
    """Why the fragment rows cannot pack `rows` (None: they can)."""
    for n in (q, out):
        axes = ir.type_of(g, n).axes
        at = [axes.index(a) for a in rows]
        if at != list(range(at[0], at[0] + len(rows))):
            return f"{', '.join(rows)} are not adjacent, in this order, in Q and O"
    wanted = set(rows)
    for n in (*kernel.nodes, *kernel.loads):
        some = wanted & set(ir.type_of(g, n).axes)
        if some and some != wanted:
            return (f"a value of the kernel reads `{sorted(some)[0]}` without "
                    f"`{sorted(wanted - some)[0]}` (a mask over the queries): the block's "
                    "rows span no interval of it")
    return None


def position(axes: tuple[str, ...], axis: str) -> int:
    """Where `axis` is among an array's `axes`; a packed axis: where its innermost axis is."""
    return axes.index(axis) if axis in axes else max(axes.index(a) for a in parts(axis))


def sized(packed, sizes: dict) -> dict:
    """`sizes` with each packed axis's: the product of its axes' (`packed`: Model.packed or
    ((name, axes),) pairs)."""
    if not packed or all(p in sizes for p, _ in packed):
        return sizes
    return {**sizes, **{p: math.prod(sizes[a] for a in axes) for p, axes in packed}}


def of_site(site) -> tuple:
    """The ((name, axes),) of a site whose rows are packed, () else."""
    packed = getattr(site, "packed", ())
    return ((site.row, packed),) if packed else ()


def relabel(model, site):
    """The kernel's model with the site's packed axes as their one axis (Model.packed): every
    array, op and list of axes names it once, where its first axis was."""
    packed = of_site(site)
    if not packed:
        return model
    (row, axes), = packed

    def one(names: tuple[str, ...]) -> tuple[str, ...]:
        if not set(axes) & set(names):
            return names
        return tuple(dict.fromkeys(row if a in axes else a for a in names))
    arrays = tuple(replace(a, axes=one(a.axes), used_over=one(a.used_over))
                   for a in model.arrays)
    work = tuple(replace(w, axes=one(w.axes)) for w in model.work)
    return replace(model, arrays=arrays, work=work, woven=one(model.woven),
                   reduced=one(model.reduced), axes=one(model.axes),
                   relabelled=frozenset(one(tuple(model.relabelled))), packed=packed)


def expand(axes, model) -> set:
    """`axes` with each packed axis of the model replaced by the axes it packs."""
    parts = dict(getattr(model, "packed", ()))
    return {b for a in axes for b in parts.get(a, (a,))}


__all__ = ["name", "parts", "position", "fragment_rows", "why_not", "sized", "of_site", "relabel", "expand"]
