"""How a tensor-core operand reads the kernel's loads: through names and renaming views
(`X[t m2]`, `N1[b s m]`: a tile of the array under other axis names), elementwise from them,
and 8 positions at a time from one 16-byte load where each load lies contiguous along the run
(compiler/tensorcore.py decides the site with these; codegen/computed.py stages by them)."""

from __future__ import annotations

from . import ir, split
from .canonical import through
from .model import VIEWS, storage_dtype

ELEMENTWISE = (ir.Map, ir.Assign, ir.View, ir.Const, ir.Index, ir.SizeOf)


def renames(g, n: int) -> int | None:
    """The array a view n only relabels (distinct labels, one per position: `X[t m2]`,
    `K[b h d x]`), through names and such views, or None. Its values sit at the array's
    own positions in memory (the view's axes are the array's, renamed and of the same
    sizes): a tile of it is a tile of the array, under the view's axis names (the tile's
    contiguous axis is the view's last, so a transposing rename is ldmatrix's `.trans`).
    A reshape (local_merge.py: `A[b t (h*d)]`) reads the array's own memory too, row-major
    under its merged axes."""
    if not isinstance(ir.op(g, n), VIEWS):
        return None
    while isinstance(ir.op(g, n), VIEWS):
        labels = getattr(ir.op(g, n), "labels", ())
        if len(set(labels)) != len(labels):      # a diagonal reads other positions
            return None
        n = ir.operands(g, n)[0]
    return n


def views_of(g, n: int) -> list[int]:
    """The views n reads its array through (n first; none where n is no view)."""
    out = []
    while isinstance(ir.op(g, n), VIEWS):
        out.append(n)
        n = ir.operands(g, n)[0]
    return out


def from_loads(g, n: int, members, loads) -> set | None:
    """The kernel's nodes computing n elementwise from loads (n included), or None when a
    reduction, a gather or a scan is on the way."""
    found, stack = set(), [n]
    while stack:
        m = stack.pop()
        if m in found or m in loads or m not in members:
            continue
        if not isinstance(ir.op(g, m), ELEMENTWISE):
            return None
        found.add(m)
        stack.extend(ir.operands(g, m))
    return found


def vector_loads(g, n: int, axis: str, members, loads) -> bool:
    """Whether n, computed elementwise from loads, can be computed 8 positions of `axis` at a
    time from one 16-byte load of each load along it (codegen/computed._vectored): every such
    load a 16-bit array with `axis` contiguous, read at its own positions (no view). (The
    positions' run must also lie inside the axis or outside: its size a multiple of 8.)"""
    found = from_loads(g, n, members, loads)
    if found is None:
        return False
    reads = set()
    for m, along in _along(g, n, axis, found):
        if isinstance(ir.op(g, m), ir.View) and renames(g, m) is None:
            return False            # a diagonal reads its run at two positions of its base
        reads |= {(u, _through_view(g, m, along)) for u in ir.operands(g, m) if u in loads}
    for u, along in reads:
        axes = ir.type_of(g, u).axes
        if along in axes and (axes[-1] != along or storage_dtype(g, u) not in ("f16", "bf16")
                              or split.window(g, u) is not None):
            return False
    return True


def _along(g, n: int, axis: str, found: set):
    """(node, the axis the run of `axis` is along in it) of the nodes of `found` from n
    down: a renaming view reads its label's position of its base (`N[t m2]`: m2 along N's
    m); a node the run does not vary in carries None."""
    out, stack = set(), [(n, axis)]
    while stack:
        m, along = stack.pop()
        if (m, along) in out or m not in found:
            continue
        out.add((m, along))
        stack.extend((u, _through_view(g, m, along)) for u in ir.operands(g, m))
    return out


def _through_view(g, m: int, along: str | None) -> str | None:
    """The axis of m's operand the run along `along` of m is along (m's own, but for a
    view: the base's axis at that label's position)."""
    op = ir.op(g, m)
    if not isinstance(op, ir.View) or along is None:
        return along
    base = ir.type_of(g, ir.operands(g, m)[0]).axes
    return base[op.labels.index(along)] if along in op.labels else None


def renamed_from(g, n: int) -> int:
    """What n reads, through names and renaming views (`N1[b s m]` of the intermediate N1 is
    N1's, rounded as N1 is; a view of an input is the input's)."""
    n = through(g, n)
    while isinstance(ir.op(g, n), VIEWS):
        n = through(g, ir.operands(g, n)[0])
    return n


def rounded(g, reads: list, dtype: str, other: str) -> str:
    """The dtype an operand enters the product in (`reads`: the operand itself where it is
    loaded, the loads it is computed from where computed): an f32 intermediate (stored by
    another kernel: a gradient's cotangent, a hidden activation) beside a 16-bit operand is
    rounded to that dtype as it is staged, as the chain's chunk values and FlashAttention's P
    are, read at its own positions or renamed (`N1[b s m]`); an f32 input is the user's and
    stays f32, renamed or not, and so does a value computed from one (`relu(X)` of an f32
    `X`): then the product stays on the CUDA cores (tensorcore's `_rounded`; `entered`: FlashAttention's Q, K, V)."""
    if dtype == "f32" and other in ("f16", "bf16") and not any(
            storage_dtype(g, u) == "f32" and isinstance(ir.op(g, renamed_from(g, u)), ir.Input)
            for u in reads):
        return other
    return dtype


def entered(g, loads: list) -> set:
    """The dtypes Q, K and V (their loads) enter the products in: an f32 intermediate (K also
    summed in f32 by another reader) beside a 16-bit one is rounded to it as it is staged, as
    a plain product's (`rounded`); the user's f32 input, or a value of one, is not."""
    stored = [storage_dtype(g, n) for n in loads]
    sixteen = {d for d in stored if d in ("f16", "bf16")}
    if len(sixteen) != 1:
        return set(stored)
    (other,) = sixteen
    return {rounded(g, [n], d, other) for n, d in zip(loads, stored)}


def one_dtype(g, target, operands, renamed, names: str) -> str:
    """The one 16-bit dtype the operands (loads, or renamed views of loads) enter as, which
    the target's tensor cores take; else why not (a string: explain's reason)."""
    dtypes = entered(g, [dict(renamed).get(n, n) for n in operands])
    if len(dtypes) != 1 or not dtypes <= {"f16", "bf16"}:
        return f"{names} are {'/'.join(sorted(dtypes))}; mma.sync takes one 16-bit dtype"
    (dtype,) = dtypes
    if not target.engine_for("contraction", dtype):
        return f"{target.name} has no tensor cores for {dtype}"
    return dtype
