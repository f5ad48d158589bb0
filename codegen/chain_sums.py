"""A chain's stored sums of its chunk values, added across blocks (compiler/chain_sums.py).

Per chunk, each sum's value is evaluated at the lane's elements of the chunk's C tiles (as a
product's chunk value is, 0 past the streamed axis's and the rows' ends; a nested sum read
as its operand). A sum keeping the rows and the streamed axis adds each element into the
f32 scratch with an atomic (the blocks along the summed batch axes add theirs: dB); one
keeping the rows only adds the element into the lane's register of its row, and after the
chunks each lane adds its rows (4 lanes a row); one keeping neither adds it into one
register, summed over the warp by shuffles after the chunks, and lane 0 of each warp adds it
(dslope). The scratch is converted by the chain's conversion kernel (codegen/scatter.py).
"""

from __future__ import annotations

from ..compiler import ir
from . import program as P
from .indexing import Layout
from .mma import FK


def kind(site, m) -> str:
    """"each" (one add per element), "rows" (per row after the chunks) or "all"."""
    return "each" if site.red in m.axes else "rows" if site.row in m.axes else "all"


def declare(lw, fm: int) -> None:
    """The registers of the sums added after the chunks."""
    for k, m in enumerate(lw.site.sums):
        if kind(lw.site, m) == "rows":
            lw.b.emit(P.Decl("float", f"sr{k}", "{}", shape=(fm, 2)))
        elif kind(lw.site, m) == "all":
            lw.b.emit(P.Decl("float", f"sr{k}", "0.0f"))


def chunk(lw, fm: int, size: int, tail: bool) -> None:
    """Each sum's share of this chunk: added with atomics, or into its registers."""
    b, s = lw.b, lw.site
    for k, m in enumerate(s.sums):
        how = kind(s, m)
        param, _ = lw.names[m.store]
        layout = Layout(ir.type_of(lw.g, m.store).axes, lw.sizes, lw.itype)

        def then(scope, checks, k=k, how=how, param=param, layout=layout):
            if how == "each":
                at = {a: scope[a] for a in ir.type_of(lw.g, m.store).axes}
                b.emit(P.If(f"{checks[s.row]} && {checks[s.red]}", (P.Call("atomicAdd", (
                    f"&{param}[{layout.offset(at)}]", "tv[i3][i4]")),)))
            elif how == "rows":
                b.emit(P.Set(f"sr{k}[i0][i4 / 2]", f"sr{k}[i0][i4 / 2] + tv[i3][i4]"))
            else:
                b.emit(P.Set(f"sr{k}", f"sr{k} + tv[i3][i4]"))

        def ktile(m=m, then=then):
            lw._chunk_value(m.node, m.t, tail, rows=True, then=then, inner=m.inner)
        lw._each([("i0", fm), ("i1", size // FK)], ktile)


def finish(lw, fm: int) -> None:
    """After the chunks: the sums held in registers added into the scratch."""
    b, s = lw.b, lw.site
    for k, m in enumerate(s.sums):
        how = kind(s, m)
        if how == "each":
            continue
        param, _ = lw.names[m.store]
        axes = ir.type_of(lw.g, m.store).axes
        layout = Layout(axes, lw.sizes, lw.itype)
        if how == "all":
            b.emit(P.Set(f"sr{k}", f"napkin_lanes_sum(sr{k}, 32)"))
            scope, _ = lw._checked_point({})
            b.emit(P.If("lane == 0", (P.Call("atomicAdd", (
                f"&{param}[{layout.offset({a: scope[a] for a in axes})}]", f"sr{k}")),)))
            continue

        def row(k=k, param=param, layout=layout, axes=axes):
            scope, checks = lw._checked_point({}, row="(2 * i2)")
            b.emit(P.If(checks[s.row], (P.Call("atomicAdd", (
                f"&{param}[{layout.offset({a: scope[a] for a in axes})}]", f"sr{k}[i0][i2]")),)))
        lw._each([("i0", fm), ("i2", 2)], row)


__all__ = ["kind", "declare", "chunk", "finish"]
