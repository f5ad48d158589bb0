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
Q and O per row through the decomposition (codegen/packed.py: a lane's own rows once per block,
before the key loop, where the loop reads them).
The packed axes must be adjacent and in the same order in Q (a row's offset is then `i *
stride`: Q's tile copy steps along the rows by a constant; O is stored per element at each
row's own position, so a split's partial O `[p_x q b g r d]` under a causal mask, whose layout
the mask's axes lead, packs too), and no loaded array may read
some of them without the others (a bias `B[q x]`: the model would count it over the packed
rows). A value of indices reading some of them (causal speculative decoding's `x <= q +
size(x) - size(q)`) is computed per score at the row's own (r, q), and a block's chunk skip
bounds each packed axis by the least and greatest index its rows hold (`spans`: a block
wrapping around q, as every block of 16 rows does at q = 4, spans all of q).

Where the axis the rows would run along is already a fragment long (prefill with GQA), both
forms are candidates (`options`): the planner searches each and keeps the faster
(kernel_plan.py), packed rows reading K and V once per (b, g) instead of once per position
of the other axis. The choice is then the model's (`Model.packed`) and the tiling's (its
axes name `(r q)`), which later stages read (`from_choice`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from . import ir

FRAG_ROWS = 16      # rows of an mma.sync fragment
# The epilogue's stores read each fragment row's packed axes from the lane's tables
# (codegen/packed._lane_rows: the row clamped, its remainder and quotient by a runtime size),
# filled once a block for each row a lane holds (the 4 lanes of a fragment row's quad each),
# in the kernel's index type: in 32 bits I2F, MUFU.RCP, F2I and the correction, some 23; in
# 64 bits the same behind a test that both fit 32 bits, and the call of the 64-bit division
# beside it, some 48 (static: every path once). Counted in gqa_attention's epilogues (sm_90,
# static, h100) when each two stored elements divided: 945 instructions a warp for 32
# elements at b = g = 2, r = 4, q = 5, x = 77, 32-bit; 2713 for 64 at the small shape, 64-bit;
# 579 and 1022 a row (static SASS/model 0.79 and 0.95 with 23 and 48 an element pair).
UNPACK_ROW = 23
UNPACK_ROW_WIDE = 48
QUAD = 4            # lanes of an mma.sync fragment holding one of its rows


def name(rows: tuple[str, ...]) -> str:
    """The fragment rows' axis: the one axis, or the packed axes' `(r q)` (a name no axis of
    a diagram has; the formulas print it as the product it is)."""
    return rows[0] if len(rows) == 1 else f"({' '.join(rows)})"


def parts(axis: str) -> tuple[str, ...]:
    """The axes a fragment rows' axis runs along (`name`'s inverse): split at the spaces
    outside inner brackets, so a merged axis `(h*d)` (compiler/merge.py, no space) is one
    axis alone and one part of `((h*d) q)`."""
    if not (axis.startswith("(") and axis.endswith(")")):
        return (axis,)
    out, depth, start = [], 0, 1
    for i, ch in enumerate(axis[1:-1], 1):
        depth += (ch == "(") - (ch == ")")
        if ch == " " and depth == 0:
            out.append(axis[start:i])
            start = i + 1
    out.append(axis[start:-1])
    return tuple(out) if len(out) > 1 else (axis,)


def fragment_rows(g, kernel, own_q, q: int, out: int, sizes, packed: bool | None = None
                  ) -> tuple[str, ...]:
    """The axes the fragment rows run along: Q's own axis nearest O's contiguous end, unless it
    is shorter than a fragment at the planning sizes and another is longer (decode with GQA:
    the query heads `r` of one key-value head fill the rows where `q` is 1); packed with the
    other axes of Q's rows where one of them is longer than 1 and `why_not` finds no reason
    against it, by default where that one axis is shorter than a fragment. `packed`: True or
    False asks for that form (True: where it can be)."""
    o_axes = ir.type_of(g, out).axes
    one = max(own_q, key=lambda a: (min((sizes or {}).get(a, FRAG_ROWS), FRAG_ROWS),
                                    o_axes.index(a)))
    if packed is False or sizes is None or \
            not any(sizes.get(a, 1) > 1 for a in own_q if a != one) or \
            (packed is None and sizes.get(one, FRAG_ROWS) >= FRAG_ROWS):
        return (one,)
    rows = tuple(sorted(own_q, key=ir.type_of(g, q).axes.index))     # (Q's order: why_not)
    return (one,) if why_not(g, kernel, rows, q, out) else rows


def why_not(g, kernel, rows: tuple[str, ...], q: int, out: int) -> str | None:
    """Why the fragment rows cannot pack `rows` (None: they can)."""
    axes = ir.type_of(g, q).axes        # (O is stored per element, at each row's own)
    at = [axes.index(a) for a in rows]
    if at != list(range(at[0], at[0] + len(rows))):
        return f"{', '.join(rows)} are not adjacent, in this order, in Q"
    wanted = set(rows)
    loads = set(kernel.loads)
    read = [*kernel.loads, *(n for n in kernel.nodes if isinstance(ir.op(g, n), ir.View)
                             and ir.operands(g, n)[0] in loads)]
    for n in read:
        some = wanted & set(ir.type_of(g, n).axes)
        if some and some != wanted:
            return (f"a loaded array reads `{sorted(some)[0]}` without "
                    f"`{sorted(wanted - some)[0]}` (a bias or a mask read from data over the "
                    "queries): the model would count it over the packed rows")
    return None


def spans(lo, hi, axes: tuple[str, ...], sizes: dict, ops) -> dict:
    """Each packed axis's least and greatest index over the rows lo..hi of a packed axis
    (`axes` outer to inner, row i at (i / size(q), i % size(q))): the outer axis's from the
    quotients; an inner axis's from the remainders when the rows stay in one cycle of it,
    else its whole range. `ops`: `div, mod, mul, same, pick, last` (floor division,
    remainder, product, equality, select, n - 1) for the kind of expression lo, hi and the
    sizes are (NumPy: compiler/fractions.py; C strings: codegen/flash.py)."""
    out, inner = {}, None
    for a in reversed(axes):
        ulo, uhi = (lo, hi) if inner is None else (ops.div(lo, inner), ops.div(hi, inner))
        n = sizes[a]
        if a == axes[0]:
            out[a] = (ulo, uhi)
        else:
            same = ops.same(ops.div(ulo, n), ops.div(uhi, n))
            out[a] = (ops.pick(same, ops.mod(ulo, n), 0), ops.pick(same, ops.mod(uhi, n),
                                                                  ops.last(n)))
        inner = n if inner is None else ops.mul(inner, n)
    return out


def from_choice(choice) -> bool:
    """Whether a tensor-core choice's fragment rows are packed: its warps stack along a packed
    axis (`name`'s)."""
    return any(len(parts(a)) > 1 for a, _ in choice.warps)


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
                   relabelled=frozenset(one(tuple(model.relabelled))),
                   whole_walks=frozenset(one(tuple(model.whole_walks))),
                   held_axes=frozenset(one(tuple(model.held_axes))), packed=packed)


def expand(axes, model) -> set:
    """`axes` with each packed axis of the model replaced by the axes it packs."""
    parts = dict(getattr(model, "packed", ()))
    return {b for a in axes for b in parts.get(a, (a,))}


__all__ = ["name", "parts", "position", "fragment_rows", "why_not", "spans", "from_choice", "sized", "of_site", "relabel", "expand"]


def unpacking(model, sizes: dict, wide=False):
    """Warp instructions of a packed attention's epilogue dividing its stored rows out into
    the packed axes (UNPACK_ROW*: per row of each store, its axes woven over the blocks, and
    lane of the row's quad, 32 lanes a warp); 0 where its rows are not packed. `wide`: the
    kernel indexes in 64 bits (per candidate)."""
    if not model.packed:
        return 0.0
    rows = sum(math.prod(sizes[a] for a in arr.axes if a in model.woven) for arr in model.arrays
               if arr.role == "store" and arr.node not in model.across)
    return rows * QUAD * np.where(wide, UNPACK_ROW_WIDE, UNPACK_ROW) / 32
