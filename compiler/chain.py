"""Chains of matrix products on tensor cores: products of a chunk feeding products over it.

A kernel qualifies when it streams `red` through matrix products only, every one of
them fed, chunk by chunk, by elementwise functions of products over a static axis:

    S_j[batch.. row red] = sum over dk_j of A_j[.. row dk_j] * B_j[.. red dk_j]   (scores)
    T_i[batch.. row red] = f_i(S_1, S_2, .., loads, indices)                      elementwise
    O_i[batch.. row e_i] = g_i(sum over red of T_i * C_i[.. red e_i])             (outputs)

with every A, B, C a load of one 16-bit dtype, every `dk` and `e` static (any size: tiles
padded to multiples of 16 and 8 with zeros, headpad.py), and no other reduction (no
softmax: attention is flash.py's). FlashAttention's backward is this twice: with the keys' rows stationary
(rows `x`, `q` streamed) S^T = K Q, dP^T = V dO, dS^T = P^T (dP^T - D) and dK += dS^T Q,
dV += P^T dO; with the queries' rows (rows `q`, `x` streamed) the same scores and
dQ += dS K. So is an MLP streamed over its hidden axis (S = X W1, T = gelu(S), O += T W2).

The block takes `BM` rows (one position of each batch axis); each of its `wm` warps owns
`BM / wm` rows as 16-row fragments. The stationary operands A are copied to shared memory
once and read into A fragments (ldmatrix.x4) each chunk; per chunk the streamed operands
(B and C: one shared tile per array, read both ways) are staged, every score tile comes
out of the tensor cores as C fragments, each T_i is evaluated at its elements (0 past the
last position of `red`), packed to 16 bits as the A fragments of `T_i C_i` (the C layout
of two 8-wide tiles is the A layout of one 16-wide tile), and accumulated into O_i's f32
fragments. For the cost model the register level's unit is the warp, as for the other
tensor-core kernels (cost.py).

A chain may also compute products over its rows, added across blocks (`Across`):

    U_k[batch.. red e_k] = sum over row of T_k[.. row red] * L_k[.. row e_k]      (stored)

FlashAttention-2's dQ += dS K in the dK/dV kernel: each block holds `BM` of the rows, so
its share of U over the chunk is a partial sum that the blocks add with atomics into an f32
scratch (zeroed before the first launch), which a second kernel converts to U's dtype and
clears (codegen/scatter.py's conversion). The model holds `row` woven (the grid's) and the
stored U as added across blocks (Model.across: 4 bytes a value from every block of rows,
at the target's `[l2] atomics` rate, cost.py).

A chain may also store sums of its chunk values over the batch axes, rows and streamed axis
(`ChainSite.sums`, chain_sums.py): an attention bias's gradient sum[b](dS), added across
blocks the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from .canonical import through
from .graph import ancestors

from . import chain_sums, flash, headpad, ir, occupancy, warps
from .cost import Choice, Cost
from .kernels import is_free
from .model import Model, storage_dtype
from .specialise import fix
from .target import Target

# fragment registers per lane (scores, outputs, a packed A fragment): the most ptxas held without
# spilling in the attention gradients' chains (sm_90: 164 at 7 ops per score, 244-248 registers;
# 196 spilled or sat at 255 in every kernel tried); below it the estimate within 255
# (occupancy.py) decides: d = 128's dK and dV in one kernel (148: ptxas 239-242) fit
MAX_REGISTERS = 164
# ... and with a mask's ops in the chunk (more than occupancy.CHAIN_OPS: causal's gradient):
# ptxas held 132 (241-252 registers) and spilled at 148 (224 bytes) and 164 (48-264)
MASKED_MAX_REGISTERS = 132
# ... and with a product over the rows (Across: its chunk values staged, its tiles' fragments,
# the atomics' addresses live beside the scores): ptxas (sm_90, attention's gradient at
# d = 64) held 84 in 184-201 registers and spilled at 100 (8 bytes), 132 (224) and 164 (40-56)
ACROSS_MAX_REGISTERS = 96
PACKED = 4                               # registers of one packed A fragment of T_i


class OneRowAxis:
    """A site whose fragment rows run along one axis of the diagram (flash.FlashSite's may be
    packed: several)."""

    @property
    def row_axes(self) -> tuple[str, ...]:
        return (self.row,)


@dataclass(frozen=True)
class Score:
    node: int               # the contraction S_j = A_j B_j over dk
    a: int                  # the stationary operand (row, dk)
    b: int                  # the streamed operand (red, dk)
    dk: str
    head: int               # size of dk


@dataclass(frozen=True)
class Product:
    node: int               # the contraction O_i = T_i C_i over red
    t: int                  # the chunk's value (row, red)
    c: int                  # the streamed operand (red, e)
    e: str
    width: int              # size of e


@dataclass(frozen=True)
class Across:
    node: int               # the contraction U_k = T_k L_k over the rows
    t: int                  # the chunk's value (row, red)
    c: int                  # the loaded operand (row, e)
    e: str
    width: int              # size of e
    store: int              # U_k's stored node (through names: the contraction)


@dataclass(frozen=True)
class ChainSite(OneRowAxis):
    row: str                # the fragment rows (woven)
    red: str                # the streamed axis
    batch: tuple[str, ...]
    dtype: str
    scores: tuple[Score, ...]
    outs: tuple[Product, ...]
    ops: int = 0            # elementwise ops per value of the chunk beyond the first
                            # (occupancy.score_ops: a mask's)
    across: tuple[Across, ...] = ()   # products over the rows, added across blocks
    padded: tuple = ()      # heads of other sizes than 16's (contracted) and 8's (kept)
                            # multiples: tiles' and products' padded extents (headpad.py)
    sums: tuple = ()        # stored sums of the chunk's values, added across blocks
                            # (chain_sums.Summed: an attention bias's gradient)


def examine(g, kernel, model: Model, target: Target, sizes: dict | None = None
            ) -> ChainSite | str | None:
    """The kernel's chain of products on tensor cores, why not (a string), or None when
    the kernel is no chain: fewer than two contractions (a product or no product at all),
    or another reduction beside them (the plain product's reason says so) that is no
    stored sum of the chunk's values (chain_sums.py), or is one but the chain is not."""
    nested = chain_sums.candidates(g, kernel)
    found = _examine(g, kernel, model, target, sizes, nested)
    return None if nested and isinstance(found, str) else found


def _examine(g, kernel, model: Model, target: Target, sizes, nested: dict):
    contractions = [n for n in kernel.nodes if isinstance(ir.op(g, n), ir.Contract)]
    if len(contractions) < 2:
        return None
    st = model.streaming
    summing = set(nested) | {i for inner in nested.values() for i in inner}
    others = [n for n in kernel.nodes if isinstance(ir.op(g, n), (ir.Reduce, ir.Softmax))
              and n not in summing]
    if others or st.pairs or st.stats:
        return None                # attention's (flash.py), or no tensor-core kernel at all
    red = st.axis
    if red is None or st.passes != 1:
        return "the kernel's products are not streamed in one pass"
    outs = [n for n, _ in st.reducers if n not in summing]
    if any(not isinstance(ir.op(g, n), ir.Contract) or ir.op(g, n).axes != (red,)
           for n in outs):
        return f"a streamed reduction over `{red}` is not a matrix product"
    loads = set(kernel.loads)
    if not outs:
        return "no streamed product"
    across = [n for n in contractions if n not in outs and _over_rows(g, kernel, n, red, loads)]
    scores = [n for n in contractions if n not in outs and n not in across]
    if not scores:
        return "no product of the chunk feeds the streamed products"
    woven = set(model.woven)
    rows_of_across = {ir.op(g, n).axes[0] for n in across}
    if len(across) > 1:
        return "more than one product over the rows (one is lowered: dQ's)"
    woven |= rows_of_across       # the grid's rows: their partial sums added across blocks
    woven |= {a for n in summing for a in ir.op(g, n).axes}    # (and those the sums add over)
    found = [_score(g, n, red, loads) for n in scores]
    if any(isinstance(f, str) for f in found):
        return next(f for f in found if isinstance(f, str))
    # the rows: a woven axis of every stationary operand and every output
    candidates = woven.intersection(*(set(ir.type_of(g, s.a).axes) for s in found),
                                    *(set(ir.type_of(g, n).axes) for n in outs))
    # ... that no operand staged once for all the block's rows has (each score's B, each
    # streamed product's loaded C: `W2[b f o]` leaves b to the batch)
    candidates -= set().union(*(set(ir.type_of(g, s.b).axes) for s in found),
                              *(set(ir.type_of(g, m).axes) for n in outs
                                for m in ir.operands(g, n) if m in loads))
    if not candidates:
        return "the products share no row axis"
    o_axes = ir.type_of(g, outs[0]).axes
    row = max(candidates, key=lambda a: (min((sizes or {}).get(a, flash.FRAG_ROWS),
                                             flash.FRAG_ROWS), o_axes.index(a)))
    if rows_of_across and rows_of_across != {row}:
        return "a product over the rows does not add over the chain's rows"
    axes = g.graph["axes"]
    products = []
    for n in outs:
        t, c = ir.operands(g, n)
        if t in loads:
            t, c = c, t
        if c not in loads or t in loads:
            return "a streamed product does not take one loaded operand"
        t_axes, c_axes, n_axes = (set(ir.type_of(g, m).axes) for m in (t, c, n))
        own = (c_axes & n_axes) - t_axes - {row}
        if red not in c_axes or red not in t_axes or row not in t_axes or len(own) != 1:
            return "a streamed product is not T[.. row red] C[.. red e]"
        (e,) = own
        width = axes[e].size
        if width is None:
            return f"`{e}` must be static {fix(axes, e)}"
        products.append(Product(n, t, c, e, width))
    # the batch axes: one position per block (an output's own axis is whole in the block)
    own_axes = {p.e for p in products}
    batch = tuple(a for a in o_axes if a in woven and a != row and a not in own_axes)
    chunk_axes = set(batch) | {row, red}
    for p in products:
        if not set(ir.type_of(g, p.node).axes) <= set(batch) | {row, p.e} or \
                not set(ir.type_of(g, p.t).axes) <= chunk_axes or \
                not set(ir.type_of(g, p.c).axes) <= set(batch) | {red, p.e}:
            return "a streamed product is not T[.. row red] C[.. red e]"
    scored = []
    for s in found:
        if not set(ir.type_of(g, s.node).axes) <= chunk_axes or \
                not set(ir.type_of(g, s.a).axes) <= set(batch) | {row, s.dk} or \
                not set(ir.type_of(g, s.b).axes) <= set(batch) | {red, s.dk}:
            return "a product of the chunk is not A[.. row d] B[.. red d]"
        head = axes[s.dk].size
        if head is None:
            return f"`{s.dk}` must be static {fix(axes, s.dk)}"
        scored.append(Score(s.node, s.a, s.b, s.dk, head))
    dtypes = {storage_dtype(g, n) for s in scored for n in (s.a, s.b)} | \
        {storage_dtype(g, p.c) for p in products}
    if len(dtypes) != 1 or not dtypes <= {"f16", "bf16"}:
        return f"the products' operands are {'/'.join(sorted(dtypes))}; mma.sync takes one " \
            "16-bit dtype"
    (dtype,) = dtypes
    if not target.engine_for("contraction", dtype):
        return f"{target.name} has no tensor cores for {dtype}"
    added = []
    for n in across:
        found = _across(g, kernel, n, row, red, batch, loads)
        if isinstance(found, str):
            return found
        if storage_dtype(g, found.c) != dtype:
            return "a product over the rows takes another dtype than the chain's"
        added.append(found)
    sums = chain_sums.examine(g, kernel, nested, row, red, batch)
    if isinstance(sums, str):
        return sums
    why = _elementwise(g, kernel, loads, chunk_axes, set(batch) | {row}, products,
                       {a.node for a in added} | summing)
    if why:
        return why
    return ChainSite(row, red, batch, dtype, tuple(scored), tuple(products),
                     occupancy.ops_along(model, red), tuple(added),
                     _padded(scored, products, added, {a: axes[a].size for a in axes}), sums)


def _padded(scored, products, added, sizes: dict) -> tuple:
    """ChainSite.padded (headpad.decide): the scores' operands and products over their
    contracted axes, the outputs' and the products over the rows' over their kept ones."""
    tiles = [(n, s.dk, True) for s in scored for n in (s.a, s.b)]
    tiles += [(p.c, p.e, False) for p in products] + [(a.c, a.e, False) for a in added]
    work = [(s.node, s.dk, True) for s in scored]
    work += [(p.node, p.e, False) for p in products] + [(a.node, a.e, False) for a in added]
    return headpad.decide(tiles, work, sizes)


def _over_rows(g, kernel, n: int, red: str, loads: set) -> bool:
    """Whether contraction n is a product over the rows stored from every block (Across):
    one contracted axis, a loaded operand without the streamed axis, the other a chunk
    value with it, the result over the streamed axis and stored as it is."""
    op = ir.op(g, n)
    if len(op.axes) != 1:
        return False
    u, v = ir.operands(g, n)
    if v in loads and u not in loads:
        u, v = v, u
    if u not in loads or v in loads:
        return False
    (a,) = op.axes
    c_axes, t_axes = ir.type_of(g, u).axes, ir.type_of(g, v).axes
    return red not in c_axes and red in t_axes and a in t_axes and \
        red in ir.type_of(g, n).axes and any(through(g, m) == n for m in kernel.stores)


def _across(g, kernel, n: int, row: str, red: str, batch, loads) -> Across | str:
    """Product n over the rows (`_over_rows`) as the lowering takes it, or why not."""
    u, v = ir.operands(g, n)
    c, t = (u, v) if u in loads else (v, u)
    own = set(ir.type_of(g, c).axes) - {row} - set(batch)
    if len(own) != 1 or not set(ir.type_of(g, t).axes) <= set(batch) | {row, red} or \
            not set(ir.type_of(g, n).axes) <= set(batch) | {red} | own:
        return "a product over the rows is not T[.. row red] L[.. row e]"
    (e,) = own
    width = g.graph["axes"][e].size
    if width is None:
        return f"`{e}` must be static {fix(g.graph['axes'], e)}"
    store = next(m for m in kernel.stores if through(g, m) == n)
    return Across(n, t, c, e, width, store)


def _score(g, n: int, red: str, loads: set):
    """A product of the chunk: its stationary and streamed operands (loads), or why not."""
    op = ir.op(g, n)
    u, v = ir.operands(g, n)
    if len(op.axes) != 1 or u not in loads or v not in loads or u == v:
        return "a product of the chunk does not contract two loaded arrays over one axis"
    if red in ir.type_of(g, u).axes:
        u, v = v, u
    if red in ir.type_of(g, u).axes or red not in ir.type_of(g, v).axes:
        return f"a product of the chunk needs one operand over `{red}` and one without it"
    return Score(n, u, v, op.axes[0], 0)


def _elementwise(g, kernel, loads, chunk_axes, rows, products, across=frozenset()
                 ) -> str | None:
    """Why the rest of the kernel is not elementwise on the chunk or on the outputs (the
    products over the rows, `across`, and the names of them are theirs)."""
    outs = {p.node for p in products}
    for n in kernel.nodes:
        if n in loads or isinstance(ir.op(g, n), ir.Contract) or is_free(g, n) or \
                through(g, n) in across:
            continue
        if isinstance(ir.op(g, n), ir.View) and ir.operands(g, n)[0] in loads:
            continue         # a loaded array read at renamed positions (doc[q] beside doc[x])
        if not isinstance(ir.op(g, n), flash.ELEMENTWISE):
            return "a view or another operation sits between the products"
        axes = set(ir.type_of(g, n).axes)
        if not (axes <= chunk_axes or any(axes <= rows | {p.e} for p in products)):
            return "the kernel computes values over other axes than its products'"
    by_e = {p.node: p.e for p in products}
    for n in kernel.stores:
        if through(g, n) in across:
            continue
        axes = ir.type_of(g, n).axes
        own = set(axes) - rows
        if len(own) != 1 or not own <= {p.e for p in products}:
            return "the kernel stores a value of every chunk, or one over no output's axes"
        (e,) = own
        feeding = ancestors(g, n) & outs | ({n} & outs)
        if any(by_e[o] != e for o in feeding) or not feeding:
            return "a stored value is not made of the products of its own axes"
    return None


def registers(fm, chunk, site: ChainSite):
    """Fragment registers per lane (per entry of arrays of fragments and chunks): every score
    tile of the chunk, every output's accumulators, one packed A fragment."""
    return fm * (len(site.scores) * (chunk // 8) * 4
                 + sum(headpad.fragments(p.width) * 4 for p in site.outs)) + PACKED


def search(model: Model, cols, target: Target, sizes: dict, s: ChainSite,
           fixed: dict) -> tuple[Choice, Cost] | None:
    """The fastest tiling of the chain that fits, honouring block-level hints."""
    found = candidate_set(sizes, s, fixed)
    if found is None:
        return None
    return warps.cheapest(model, cols, target, sizes, *found)


def candidate_set(sizes: dict, s: ChainSite, fixed: dict):
    """(the tilings the axes and hints allow as a candidate set, the keys breaking ties),
    or None: FlashAttention-2's rows and chunks, within the chain's register budget."""
    cap = MAX_REGISTERS if s.ops <= occupancy.CHAIN_OPS else MASKED_MAX_REGISTERS
    if s.across:
        cap = min(cap, ACROSS_MAX_REGISTERS)
    return flash.row_tilings(sizes, s.row, s.red, s.batch, fixed,
                             lambda fm, chunk, _: registers(fm, chunk, s) <= cap)


__all__ = ["ChainSite", "Score", "Product", "Across", "examine", "search", "candidate_set", "registers"]
