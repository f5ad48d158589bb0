"""A store that copies a row of a load, each thread's consecutive points as one 16-byte copy
(compiler/row_runs.py decides which: Schedule.runs).

    if (n % 8 == 0) {                       // (no test where the size is a constant)
      if (<the run's first point in range>) {
        const uint4* const cps = reinterpret_cast<const uint4*>(E + <its source>);
        uint4* const cpd = reinterpret_cast<uint4*>(X + <its destination>);
        cpd[0] = cps[0];
      }
    } else {                                // a row not a multiple: value by value
      #pragma unroll 1
      for (int k = 0; k < 8; ++k) { <the point k past the base, as the epilogue stores it> }
    }

Where the size is a multiple of the run, the runs start at multiples of it (the block tile
is one, row_runs.runs) and lie wholly inside or outside the array: the first point's test
is the run's. The fallback loop is kept rolled: one copy of the point's code, and a loop
benchmarks/sass_simt.py counts 0 times where the size test is taken.
"""

from __future__ import annotations

from ..compiler import ir
from ..compiler.canonical import through
from . import program as P
from .builder import Ix
from .staging import VECTORS


def copy(lw, n: int, width: int) -> None:
    """Store n's points of this thread in runs of `width` (see the module docstring)."""
    b, g = lw.b, lw.g
    axis = ir.type_of(g, n).axes[-1]
    size = lw.sizes[axis]
    lw.line(n)
    vector = lw._scoped(lambda: _vector(lw, n, axis, width))
    if size.isdigit() and int(size) % width == 0:
        b.emit(P.Block(vector))
        return
    each = lw._scoped(lambda: _each(lw, n, axis, width))
    if size.isdigit():
        b.emit(P.Block(each))
        return
    b.emit(P.If(f"{size} % {width} == 0", vector, each))


def _vector(lw, n: int, axis: str, width: int) -> None:
    b, g = lw.b, lw.g
    first = lw.point({a: 0 for a in lw.woven})
    scope = dict(first["scope"])
    scope[axis] = Ix(lw._axis_var("base", axis))     # inside the array where the run is
    value = through(g, n)
    op, args = ir.op(g, value), ir.operands(g, value)
    base = args[0]
    positions = iter(args[1:])
    inner = {}
    for a, label in zip(ir.type_of(g, base).axes, op.labels):
        if label is not None:
            inner[a] = scope[label]
        else:       # a gathered position, clamped to its axis as the emitter's gather
            i = lw.emitter.value(next(positions), first["scope"])
            inner[a] = Ix(b.value("long long", f"napkin_clamp_index({i}, {lw.sizes[a]})", "ix"))
    vtype, _ = VECTORS[16]
    source = lw.global_layout(base).offset(inner)
    dest = lw.global_layout(n).offset(scope)

    def run():
        b.emit(P.Decl(f"const {vtype}* const", "cps",
                      f"reinterpret_cast<const {vtype}*>({lw.names[base][0]} + ({source}))"))
        b.emit(P.Decl(f"{vtype}* const", "cpd",
                      f"reinterpret_cast<{vtype}*>({lw.names[n][0]} + ({dest}))"))
        b.emit(P.Set("cpd[0]", "cps[0]"))
    b.emit(P.If(first["valid"], lw._scoped(run)))


def _each(lw, n: int, axis: str, width: int) -> None:
    var = lw.b.fresh("k")

    def body():
        pt = lw.point({a: var if a == axis else 0 for a in lw.woven})
        lw._store(n, dict(pt["scope"]), pt)
    lw.b.loop(var, "0", str(width), "1", body, unroll=1)
