"""A sum of matrix products over one streamed axis, as one tensor-core product.

A gradient gives an input read by several products a cotangent that is a sum of products
(the block's `dN1 = dQ Wq + dK Wk + dV Wv`, a projected attention's `dX`):

    Z[batch.. row col] = A_1 B_1 + A_2 B_2 + ... (+ whatever else is elementwise over Z)

each `A_i[.. row red] B_i[.. red col]` summed over the kernel's streamed axis `red`. A sum of
products over k axes is one product over the concatenated k axes: the same output tile, one
chunk loop after another over each pair, all into the same f32 fragments (codegen/mma.py).
The first product stands for the sum in the epilogue and the others for 0, which is right
because each product reaches the rest of the kernel through additions alone (`_root`: a
chain of `+` and names, one reader each, to one node that every product reaches), so the
node they reach holds the sum whichever product carries it.

The site is a `tensorcore.Site` whose `pairs` are the further products (node, A, B), each
pair's operands loads (or views only renaming loads) of the site's dtype, oriented as the
first pair's: A_i holds the rows, B_i the columns. Their tiles are staged like the first
pair's (staged_tiles.py), and their accumulators are the first's (`model_of` charges them
no registers: one accumulator tile is emitted). Fusion also starts from each statement summing
products of statements of their own merged with them (`statements`, fuse.py).
"""

from __future__ import annotations

from dataclasses import replace

from . import ir, split
from .canonical import through
from .model import Model
from .operand_reads import entered, renames, views_of
from .target import Target


def examine(g, kernel, model: Model, target: Target, site_type):
    """The kernel's sum of products as a `site_type` (tensorcore.Site) with `pairs`, why not
    (a string), or None where the kernel is no sum of streamed products (fewer than two
    contractions, another reduction, a product not streamed, or no common sum)."""
    contractions = sorted(n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Contract))
    if len(contractions) < 2 or any(isinstance(ir.op(g, n), (ir.Reduce, ir.Softmax, ir.Scan))
                                    for n in kernel.nodes):
        return None
    st, red = model.streaming, model.streaming.axis
    if st.pairs or st.stats or st.passes != 1 or red is None or \
            {n for n, _ in st.reducers} != set(contractions) or set(model.reduced) != {red} or \
            any(ir.op(g, n).axes != (red,) for n in contractions):
        return None
    members, stores = set(kernel.nodes), set(kernel.stores)
    roots = {_root(g, n, members, stores) for n in contractions}
    if None in roots or len(roots) != 1:
        return None
    out = ir.type_of(g, contractions[0]).axes
    if any(ir.type_of(g, n).axes != out for n in contractions):
        return "the summed products have different axes (one tile of fragments holds them)"
    loads = set(kernel.loads)
    operands = [tuple(ir.operands(g, n)) for n in contractions]
    for x in (m for pair in operands for m in pair):
        if split.unmasked(g, x) != x or split.window(g, x) or \
                (x not in loads and renames(g, x) not in loads):
            return ("an operand of a summed product is not a load (a sum of products on "
                    "tensor cores stages loaded tiles)")
    read = [x if x in loads else renames(g, x) for pair in operands for x in pair]
    if len(set(read)) != len(read):
        return ("two summed products read the same array (the model reads it once; each "
                "pair would copy its tiles again)")
    # (an f32 intermediate beside 16-bit operands is rounded as it is staged, as a product's)
    dtype = sixteen_bit(g, operands, target)
    if dtype is None:
        return "the summed products' operands are not all f16 or all bf16"
    oriented = [_oriented(g, pair, out) for pair in operands]
    if any(o is None for o in oriented):
        return "a summed product is not a matrix product of its own rows and columns"
    (a, b, row, col), rest = oriented[0], oriented[1:]
    batch = tuple(x for x in out if x not in (row, col))
    for a_i, b_i, r_i, c_i in rest:
        if (r_i, c_i) != (row, col):
            return "the summed products take their rows and columns along different axes"
    skipped = loads | {m for pair in operands for x in pair for m in (x, *views_of(g, x))}
    for n in (members | stores) - (skipped - stores):
        if not set(ir.type_of(g, n).axes) <= set(out):
            return "the kernel computes values over other axes than the product's"
    renamed = tuple(dict.fromkeys((x, renames(g, x)) for pair in operands for x in pair
                                  if x not in loads))
    pairs = tuple((n, a_i, b_i) for n, (a_i, b_i, _, _) in zip(contractions[1:], rest))
    return site_type(contractions[0], a, b, row, col, red, batch, dtype, renamed=renamed,
                     pairs=pairs)


def model_of(model: Model, site) -> Model:
    """The model of a sum of products (tensorcore.for_site): the further products'
    accumulators are the first's fragments (codegen/mma.py accumulates every pair into
    them): no bytes of their own; the pairs' pipelines run one after another (Model.summed)."""
    further = {n for n, _, _ in site.pairs}
    return replace(model, arrays=tuple(replace(a, bytes=0) if a.role == "accumulator" and
                                       a.node in further else a for a in model.arrays),
                   summed=1 + len(further))


def sixteen_bit(g, operands, target: Target) -> str | None:
    """The one 16-bit dtype the products' operands (pairs) enter in, where the target's tensor
    engine multiplies it, else None (sums.py's and duals.py's rule)."""
    dtypes = entered(g, [m for pair in operands for m in pair])
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    return dtype if dtype in ("f16", "bf16") and target.engine_for("contraction", dtype) \
        else None


def _oriented(g, pair, out) -> tuple[int, int, str, str] | None:
    """(the operand holding the rows, the one holding the columns, rows, columns) of a product
    with output axes `out` (tensorcore._product's rule: each operand's own axis nearest the
    output's contiguous end; the later one is the columns), or None where an operand has no
    axis of its own in the output."""
    x, y = pair
    ax, ay = set(ir.type_of(g, x).axes), set(ir.type_of(g, y).axes)
    only_x, only_y = ax - ay, ay - ax
    if not only_x or not only_y or not (only_x | only_y) <= set(out):
        return None
    rx, ry = max(only_x, key=out.index), max(only_y, key=out.index)
    return (x, y, rx, ry) if out.index(rx) < out.index(ry) else (y, x, ry, rx)


def _root(g, n: int, members: set, stores: set) -> int | None:
    """The node a product's value reaches through additions and names (same axes) alone, each
    step the one reader of the last and reading it once: the sum it is a term of (None where
    the product itself is read otherwise, or stored)."""
    steps = 0
    while n not in stores:
        readers = [v for v in g.successors(n) if v in members]
        if len(readers) != 1 or len(g.edges[n, readers[0]]["ports"]) != 1:
            break
        v = readers[0]
        op = ir.op(g, v)
        # (a name of the same axes and no declared dtype: through() looks through it)
        if not (isinstance(op, ir.Map) and op.fn == "add" or
                isinstance(op, ir.Assign) and op.dtype is None and through(g, v) == through(g, n)):
            break
        n, steps = v, steps + 1
    return n if steps else None


def statements(g, stmts: dict) -> list[set]:
    """Statements summing products that statements of their own compute, each with those
    (`dN1 = g22[b t m] + g19[b t m] + g16`, each g a product): greedy fusion also starts from
    them merged (fuse.py), as its pairwise steps through one product and the sum may each
    lose where the whole sum in one kernel pays."""
    owner = {n: s for s, nodes in stmts.items() for n in nodes}
    found = []
    for s, nodes in sorted(stmts.items()):
        terms = set()
        for n in nodes:
            if not (isinstance(ir.op(g, n), ir.Map) and ir.op(g, n).fn == "add"):
                continue
            for u in ir.operands(g, n):
                u = renames(g, u) if renames(g, u) is not None else u
                if owner.get(u, s) != s and _product(g, stmts[owner[u]]):
                    terms.add(owner[u])
        if len(terms) >= 2:
            found.append({s} | terms)
    return found


def _product(g, nodes) -> bool:
    """Whether a statement's nodes compute one product (and name it)."""
    kinds = [type(ir.op(g, n)) for n in nodes]
    return kinds.count(ir.Contract) == 1 and set(kinds) <= {ir.Contract, ir.Assign, ir.View,
                                                             ir.Reshape}


__all__ = ["examine", "model_of", "statements"]
