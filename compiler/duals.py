"""Products sharing one streamed chunk loop, each into accumulators of its own (dual GEMM).

SwiGLU's gate and up projections read one X (`G = X Wg`, `U = X Wu`, `H = silu(G) U`), as
CUTLASS's dual GEMM or one GEMM over the concatenated [Wg Wu] with the gating in its epilogue
computes them: per chunk of the contracted axis the block stages each operand's tile once (X
once for both), every warp loads each distinct operand's fragments once and issues both
products' mmas into two accumulator tiles; the epilogue reads both (silu(G) * U) and stores
once. G and U never leave the registers; X is read once.

    C_i[batch.. row col] = A_i[batch.. row red] B_i[batch.. red col]    (i = 1 .. n)

every product over the same output axes and the kernel's one streamed axis `red`, each A_i
holding the rows, each B_i the columns (tensorcore._product's orientation), operands loads of
one 16-bit dtype (an A shared by several products, or a B, is one tile), everything else
elementwise over the output axes, and some value of the epilogue reads every product (a
product may also reach the stores in other ways: a sum of products whose terms are read
otherwise too is one of these, its epilogue adds them). Independent products, each only
stored, stay kernels of their own (siblings.py shares their launch).

The site is a `tensorcore.Site` whose `duals` are the further products (node, A, B); codegen
(codegen/mma.py) declares an accumulator tile per product. The model (`model_of`) keeps every
product's accumulator (registers add up) and Model.products says how many fragment tiles a
warp holds (occupancy.fragment_values); the candidate tilings keep all the accumulators
within tensorcore.MAX_ACCUMULATORS (`accumulators`).
"""

from __future__ import annotations

from dataclasses import replace

from . import ir, split
from .graph import ancestors
from .sums import _oriented, sixteen_bit
from .model import Model
from .target import Target


def examine(g, kernel, model: Model, target: Target, site_type):
    """The kernel's products as a `site_type` (tensorcore.Site) with `duals`, why not (a
    string), or None where the kernel is not two or more streamed products and elementwise
    work (another reduction, a product not streamed: tensorcore._product says why)."""
    contractions = sorted(n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Contract))
    if len(contractions) < 2 or any(isinstance(ir.op(g, n), (ir.Reduce, ir.Softmax, ir.Scan))
                                    for n in kernel.nodes):
        return None
    st, red = model.streaming, model.streaming.axis
    if st.pairs or st.stats or st.passes != 1 or red is None or \
            {n for n, _ in st.reducers} != set(contractions) or set(model.reduced) != {red} or \
            any(ir.op(g, n).axes != (red,) for n in contractions):
        return None
    # products the epilogue reads together (SwiGLU's silu(G) * U); independent products of
    # one operand, each stored alone (projections of one X), share a launch instead
    # (siblings.py), reading it from L2
    if not any(set(contractions) <= ancestors(g, n) for n in kernel.nodes):
        return None
    if model.mask is not None:
        return "the products are masked (products with accumulators of their own are not)"
    out = ir.type_of(g, contractions[0]).axes
    if any(ir.type_of(g, n).axes != out for n in contractions):
        return ("the kernel's products have different axes (products sharing a chunk loop "
                "each hold a tile of fragments of the same output axes)")
    loads = set(kernel.loads)
    operands = [tuple(ir.operands(g, n)) for n in contractions]
    for x in (m for pair in operands for m in pair):
        if x not in loads or split.unmasked(g, x) != x or split.window(g, x):
            return ("an operand of the kernel's products is not a load (products sharing a "
                    "chunk loop stage loaded tiles)")
    dtype = sixteen_bit(g, operands, target)
    if dtype is None:
        return "the products' operands are not all f16 or all bf16"
    oriented = [_oriented(g, pair, out) for pair in operands]
    if any(o is None for o in oriented):
        return "a product is not a matrix product of its own rows and columns"
    (a, b, row, col), rest = oriented[0], oriented[1:]
    if any((r, c) != (row, col) for _, _, r, c in rest):
        return "the products take their rows and columns along different axes"
    rows, cols = {o[0] for o in oriented}, {o[1] for o in oriented}
    if rows & cols or any(x == y for x, y, _, _ in oriented):
        return ("an array is read as both operands of the products (each side's tile is "
                "staged once, in its own layout)")
    skipped = loads | set(m for pair in operands for m in pair)
    for n in (set(kernel.nodes) | set(kernel.stores)) - (skipped - set(kernel.stores)):
        if not set(ir.type_of(g, n).axes) <= set(out):
            return "the kernel computes values over other axes than the products'"
    batch = tuple(x for x in out if x not in (row, col))
    duals = tuple((n, x, y) for n, (x, y, _, _) in zip(contractions[1:], rest))
    return site_type(contractions[0], a, b, row, col, red, batch, dtype, duals=duals)


def counts(site) -> tuple[int, int, int]:
    """(products, distinct A operands, distinct B operands) of a site: a warp's accumulator
    tiles and the fragments it loads per 16 of a chunk."""
    products = ((site.node, site.a, site.b),) + tuple(getattr(site, "duals", ()))
    return (len(products), len({a for _, a, _ in products}), len({b for _, _, b in products}))


def model_of(model: Model, site) -> Model:
    """The model of products with accumulators of their own (tensorcore.for_site): every
    product's accumulator is the model's already (the registers add up); Model.products
    holds `counts` for the register estimate (occupancy.fragment_values)."""
    return replace(model, products=counts(site))


def accumulators(site) -> int:
    """Accumulator tiles a warp holds: one per product (a sum's pairs share one)."""
    return counts(site)[0]


__all__ = ["examine", "model_of", "counts", "accumulators"]
