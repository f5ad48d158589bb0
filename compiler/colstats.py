"""Row statistics of a tensor-core product reduced over its columns in the epilogue: which
fused kernels are one (tensorcore.examine's `Site.columns`; lowered by codegen/
column_stats.py, written by hand in tests/runtime/emulate/kernels/lmhead_ce.cu), and the
splits that make one (splitting.py: `wide_columns`, `tile_counts`).

    Z[batch.. row col] = sum over red of A[.. row red] * B[.. col red]     (tensor cores)
    S_i[batch.. row] = r_i[col](f_i(Z, loads over row and batch, indices))  r_i mergeable

An LM head and its cross-entropy split over the vocabulary (`--split v=P`: col is the share
s_v, p_v a batch axis, W read through the split's window) is one: fused, its kernel streams
m (the product's reduced axis) and holds s_v whole in a block; each `S_i` (a logsumexp, the
label's logit `sum[s_v](where(.., Z, 0))`) is reduced on chip from the C fragments and stored
per (p_v, t), which the split's merge then reduces over p_v.

`examine` finds the product with tensorcore.examine on the kernel's part that computes it
(its operands, windows included, and the contraction), then checks the rest: every other
reduction is one of MERGEABLE over `col` alone, of a float; everything else is elementwise;
the other loads run over the rows and batch axes only (read once a row: a label); no value
over `col` is stored or read by another column statistic (one pass over the fragments per
statistic, no statistic of another); the kernel streams `red` and reduces `col` and `red` only.
The block must hold `col` whole (`Columns.whole`: its tile covers the planning size of
`col`, at most the widest tensor-core tile, tensorcore.COLS), so that the statistics need no
merge across blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import flash_alone, ir
from .flash import ELEMENTWISE, FlashSite
from .graph import ancestors
from .kernels import fused_kernel
from .model import Model, kernel_model
from .target import Target

MERGEABLE = ("logsumexp", "max", "min", "sum")
WIDEST = 256        # the widest block tile of a tensor-core product (tensorcore.COLS)


@dataclass(frozen=True)
class Stat:
    node: int          # the reduction over col
    kind: str          # logsumexp | max | min | sum
    arg: int           # its argument: elementwise of the product, row loads and indices


@dataclass(frozen=True)
class Columns:
    """A product and its row statistics over its columns (module docstring)."""
    site: object                 # tensorcore.Site of the product alone
    stats: tuple[Stat, ...]
    whole: int                   # the planning size of col, held whole by each block


def examine(g, kernel, model: Model, target: Target, sizes: dict, product) -> Columns | str:
    """The kernel as a product with its row statistics over its columns, or why not
    (`product`: tensorcore.examine, which finds the product's own site)."""
    contractions = [n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Contract)]
    if len(contractions) != 1:
        return "not one contraction"
    (node,) = contractions
    members = set(kernel.nodes)
    part = (ancestors(g, node) & members) | {node}
    # (before the product's own site, which then has no reduction: no recursion through it)
    if any(isinstance(ir.op(g, n), (ir.Reduce, ir.Softmax)) for n in part):
        return "the product's operands are reduced in the kernel"
    if not any(isinstance(ir.op(g, n), ir.Reduce) for n in members):
        return "no statistic over the product's columns"
    sub = fused_kernel(g, kernel.name, part)
    site = product(g, sub, kernel_model(g, sub, model.streaming.axis), target, sizes)
    if isinstance(site, str) or not hasattr(site, "columns") or site.stats or site.pairs or \
            site.computed:
        return f"the product alone is not a plain tensor-core product ({site})"
    col, keep = site.col, {site.row, *site.batch}
    if set(model.reduced) - {col} != {site.red} or model.streaming.axis != site.red:
        return f"the kernel does not stream `{site.red}` and reduce `{col}` alone"
    stats = []
    for n in sorted(members - part):
        op = ir.op(g, n)
        if isinstance(op, ir.Reduce):
            if op.axes != (col,) or op.fn not in MERGEABLE or \
                    ir.kind_of_dtype(ir.type_of(g, n).dtype) != "float":
                return (f"`{op.fn}[{' '.join(op.axes)}]` is not a float "
                        f"{', '.join(MERGEABLE)} over `{col}` alone")
            stats.append(Stat(n, op.fn, ir.operands(g, n)[0]))
        elif not isinstance(op, ELEMENTWISE):
            return f"the kernel computes {type(op).__name__} beside the product"
    if not stats:
        return "no statistic over the product's columns"
    for u in kernel.loads:
        if u not in sub.loads and not set(ir.type_of(g, u).axes) <= keep:
            return "a load beside the product runs over other axes than its rows"
    for n in kernel.stores:
        if col in ir.type_of(g, n).axes or n in part:
            return f"the kernel stores a value over `{col}` (the product's tile leaves the chip)"
    for s in stats:
        inside = ancestors(g, s.arg) | {s.arg}
        if any(t.node in inside for t in stats):
            return "a statistic of another statistic (two passes over the columns)"
    whole = sizes[col]
    if whole > WIDEST:
        return (f"`{col}` ({whole}) is wider than a tensor-core block's tile "
                f"({WIDEST}): split it (--split) so that a block holds its share")
    # statistics of scores alone are FlashAttention's without P V (flash_alone.py), as they
    # were before this form: where it fits, or would with its head static (specialise.py)
    alone = flash_alone.examine(g, kernel, kernel_model(g, kernel, col), target, sizes)
    if isinstance(alone, FlashSite) or (isinstance(alone, str) and alone.startswith(
            flash_alone.DYNAMIC_HEAD.format(site.red))):
        return "FlashAttention without P V takes its statistics (flash_alone.py)"
    return Columns(site, tuple(stats), whole)


def wide_columns(g, kernels, sizes: dict) -> dict[str, tuple]:
    """axis -> the kernels asking for its split: where a split would let a block hold a
    product's columns whole for its row statistics (compiler/splitting.py prices those
    splits), the columns of a product one kernel stores (and nothing else) that one other
    kernel alone reads and reduces with statistics alone (MERGEABLE over that axis only, not
    sums alone, no product, no softmax, nothing stored along it), wider than a tensor-core
    tile (WIDEST)."""
    out: dict[str, tuple] = {}
    outputs = set(g.graph["outputs"].values())
    for ka in kernels:
        if not any(isinstance(ir.op(g, n), ir.Contract) for n in ka.nodes) or \
                len(ka.stores) != 1:
            continue
        for st in ka.stores:        # (the product, read by one kernel of statistics only)
            axes = set(ir.type_of(g, st).axes)
            readers = [kb for kb in kernels if st in kb.loads]
            if st in outputs or len(readers) != 1 or \
                    any(n not in readers[0].nodes for n in g.successors(st)):
                continue
            for kb in readers:
                ops = [ir.op(g, n) for n in kb.nodes] if st in kb.loads else []
                reduced = {op.axes for op in ops if isinstance(op, ir.Reduce)}
                kinds = {op.fn for op in ops if isinstance(op, ir.Reduce)}
                if len(reduced) != 1 or not kinds - {"sum"} or any(
                        isinstance(op, (ir.Contract, ir.Softmax)) or (
                            isinstance(op, ir.Reduce) and op.fn not in MERGEABLE) for op in ops):
                    continue        # (sums alone of a product: a product's, GQA's dK over r)
                (axis,) = reduced
                if len(axis) == 1 and axis[0] in axes and sizes.get(axis[0], 0) > WIDEST \
                        and not any(axis[0] in ir.type_of(g, n).axes for n in kb.stores):
                    out[axis[0]] = out.get(axis[0], ()) + (ka, kb)
    return out


def tile_counts(size: int) -> tuple[int, ...]:
    """Split counts of a wide_columns axis whose shares fill a block's columns exactly (128
    or 256 of them: no padding columns multiplied), beside the powers of two a split tries."""
    return tuple(sorted({-(-size // cols) for cols in (128, 256)}))


__all__ = ["Columns", "Stat", "examine", "tile_counts", "wide_columns", "MERGEABLE", "WIDEST"]
