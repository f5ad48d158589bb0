"""A chain's stored sums of its chunk values, added across blocks (compiler/chain_sums.py).

Per chunk, each sum's value is evaluated at the lane's elements of the chunk's C tiles, at
the first output's elements beside its chunk value (so that what they share, dS's exp, is
computed once: the C compiler's common subexpressions; 0 past the streamed axis's and the
rows' ends; a nested sum read as its operand). A sum keeping the rows and the streamed
axis adds each element into the f32 scratch with an atomic (the blocks along the summed
batch axes add theirs: dB); one
keeping the rows only adds the element into the lane's register of its row, and after the
chunks each lane adds its rows (4 lanes a row); one keeping neither adds it into one
register, summed over the warp by shuffles after the chunks, and lane 0 of each warp adds it
(dslope). The scratch is converted by the chain's conversion kernel (codegen/scatter.py).
"""

from __future__ import annotations

from ..compiler import ir
from . import program as P


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


def adder(lw, tail: bool):
    """_chunk_value's `then` at the first output's elements: each sum's value there (its
    nested sums read as their operands; 0 past the rows' and the streamed axis's ends), added
    with an atomic or into its registers. At the same element as the output's value, the
    values they share are one computation (the C compiler's common subexpressions)."""
    b, s = lw.b, lw.site

    def then(scope, checks, key):
        for k, m in enumerate(s.sums):
            for n in reversed(m.inner):
                lw.values[n] = f"({lw.emitter.value(ir.operands(lw.g, n)[0], scope)})"
            value = lw.emitter.value(m.t, scope)
            for n in m.inner:
                lw.values.pop(n)
            tests = ([f"{key} < clen"] if tail else []) + [checks[s.row]]
            v = b.value("float", f"({' && '.join(tests)}) ? {value} : 0.0f", "sv")
            how = kind(s, m)
            if how == "each":
                param, _ = lw.names[m.store]
                axes = ir.type_of(lw.g, m.store).axes
                at = lw.global_layout(m.store, axes).offset({a: scope[a] for a in axes})
                b.emit(P.If(f"{checks[s.row]} && {checks[s.red]}", (P.Call("atomicAdd", (
                    f"&{param}[{at}]", v)),)))
            elif how == "rows":
                b.emit(P.Set(f"sr{k}[i0][i4 / 2]", f"sr{k}[i0][i4 / 2] + {v}"))
            else:
                b.emit(P.Set(f"sr{k}", f"sr{k} + {v}"))
    return then


def finish(lw, fm: int) -> None:
    """After the chunks: the sums held in registers added into the scratch."""
    b, s = lw.b, lw.site
    for k, m in enumerate(s.sums):
        how = kind(s, m)
        if how == "each":
            continue
        param, _ = lw.names[m.store]
        axes = ir.type_of(lw.g, m.store).axes
        layout = lw.global_layout(m.store, axes)
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


__all__ = ["kind", "declare", "adder", "finish"]
