"""Shared-memory staging of one kernel: a buffer per staged input (its block tile, or its
chunk of the streamed axis), laid out one after another at 16-byte-aligned offsets, and
the block-wide copy that fills it (coalesced, tails zero-filled)."""

from __future__ import annotations

from ..compiler import ir
from ..compiler.model import BYTES
from . import cexpr
from . import program as P
from .builder import Ix
from .indexing import Layout

ALIGN = 16   # bytes: every shared-memory buffer starts 16-byte aligned (vector copies)
_CBYTES = {cexpr.CTYPE[d]: BYTES[d] for d in cexpr.CTYPE}


def stage(lw, n: int) -> None:
    """Copy this block's tile of input n (its chunk, for a streamed one) to shared memory."""
    if n not in lw.staged:
        _allocate(lw, n)
    name, layout = lw.staged[n]
    _, dtype = lw.names[n]
    ctype = cexpr.CTYPE[dtype]
    offset = next(s.offset for s in lw.smem if s.name == name)
    b = lw.b
    b.emit(P.Decl(f"{ctype}*", name, f"reinterpret_cast<{ctype}*>(smem + {offset})"))

    def body():
        coords, valid = layout.unflatten("e", lw.st.axis, "clen")
        scope = {a: Ix(c) for a, c in coords.items()}
        value = lw.global_at(n, Layout(layout.axes, lw.sizes, lw.itype).offset(scope))
        zero = f"napkin_from_float<{ctype}>(0.0f)"
        b.emit(P.Set(f"{name}[e]", f"({valid}) ? {value} : {zero}"))
    b.loop("e", "tid", layout.count(), f"{lw.threads}", body)


def _allocate(lw, n: int) -> None:
    """A buffer for input n after the last one, its byte term, and its layout."""
    axes = ir.type_of(lw.g, n).axes
    extents = {}
    for a in axes:
        if a in lw.tile:
            extents[a] = str(lw.tile[a])
        elif a == lw.st.axis:
            extents[a] = str(lw.kp.schedule.stream[1])
        else:
            extents[a] = lw.sizes[a]
    _, dtype = lw.names[n]
    name = f"{lw.smem_prefix}{len(lw.staged)}"
    count = " * ".join(f"({extents[a]})" for a in axes) or "1"
    lw.smem.append(P.SharedBuffer(name, cexpr.CTYPE[dtype], next_offset(lw.smem), count))
    lw.smem_terms.append(_bytes_term(axes, extents, dtype))
    origins = {a: lw._axis_var("org", a) for a in axes if a in lw.tile}
    if lw.st.axis in axes:
        origins[lw.st.axis] = "c0"
    lw.staged[n] = (name, Layout(axes, lw.sizes, lw.itype, extents, origins))


def next_offset(smem: list) -> str:
    if not smem:
        return "0"
    last = smem[-1]
    return (f"((({last.offset}) + ({last.count}) * {_CBYTES[last.ctype]} + {ALIGN - 1}) "
            f"/ {ALIGN} * {ALIGN})")


def _bytes_term(axes, extents, dtype):
    """(constant bytes, runtime size params...) of one buffer; each buffer starts at a
    multiple of ALIGN bytes, so the program reserves ALIGN - 1 more per buffer."""
    factor, params = BYTES[dtype], []
    for a in axes:
        e = extents[a]
        if e.isdigit():
            factor *= int(e)
        else:
            params.append(e)
    return (factor,) + tuple(params)
