"""A staged row copied peeled (compiler/copies.py decides where: Schedule.peels): 16 bytes a
copy along a row whose start no vector width divides.

The row is laid out in shared memory `pitch` values apart (copies.peel_pitch) and shifted
by its head `hd`: the distance, in values, of its first value past the 16-byte aligned
address before it, computed from the row's address (once a row: an offset pointer, a
view's, is handled as the arrays' aligned starts are). Value p of the row is then at
`hd + p` in shared memory, and a global address and its shared one agree modulo 16 bytes:
from the first aligned value `m0` on, every whole vector inside the row's valid length
`nlen` is one aligned 16-byte load and store; the head (values before m0) and the tail
(after the last whole vector, zeros past nlen) are copied one value a lane, lanes 0 .. w-1
and w .. 2w-1 of one more round. A tile's reads add the same head (`head`, read by
indexing.Layout)."""

from __future__ import annotations

from ..compiler import copies
from . import program as P
from .builder import Ix
from .indexing import Layout


def pitch(length: str, w: int) -> str:
    """The values a peeled row of `length` (a number or a C expression) takes in shared
    memory: copies.peel_pitch, in Python where it is a number."""
    if length.isdigit():
        return str(int(copies.peel_pitch(int(length), w)))
    return f"((({length}) + {w - 1}) / {w} * {w} + {w})"


def head_of(address: str, nbytes: int) -> str:
    """The head of a row starting at `address` (a pointer): its distance in values past the
    16-byte aligned address before it."""
    return f"(int)((reinterpret_cast<unsigned long long>({address}) & 15) / {nbytes})"


def head(param: str, layout: Layout, origin: str, nbytes: int):
    """A function of a scope giving the head of the row the scope's position is in (the row's
    first position: its position along the last axis at the tile's `origin`), in the array's
    global `layout`."""
    def of(scope: dict) -> str:
        start = layout.offset({**scope, layout.axes[-1]: Ix(origin)})
        return head_of(f"{param} + ({start})", nbytes)
    return of


def copy_row(lw, param: str, source: str, dest: str, nlen: str, length: str, w: int,
             ctype: str, vtype: str, vzero: str, read, each) -> None:
    """Copy one row peeled: its `nlen` valid values from `param + source` to the row's
    shared buffer `dest` (its first value at `dest + hd`), zeros past nlen up to the tile's
    `length`; `read(pointer, index)` is a read of global memory, `each(count, body)` the
    block's threads' walk (staging._each)."""
    b = lw.b
    itype = lw.itype
    nbytes = 16 // w
    b.emit(P.Decl(f"const {ctype}* const", "src", f"{param} + ({source})"))
    b.emit(P.Decl("const int", "hd", head_of("src", nbytes)))
    b.emit(P.Decl(f"const {itype}", "m0", f"({itype})((hd == 0) ? 0 : {w} - hd)"))
    # the whole vectors from m0 on, and the first value after them (the tail's)
    b.emit(P.Decl(f"const {itype}", "nv", f"({nlen} > m0) ? ({nlen} - m0) / {w} : 0"))
    b.emit(P.Decl(f"const {itype}", "tl", f"m0 + nv * {w}"))
    b.emit(P.Decl(f"const {vtype}* const", "cps",
                  f"reinterpret_cast<const {vtype}*>({param} + ({source}) + m0)"))
    b.emit(P.Decl(f"{ctype}* const", "cpe", f"{dest} + hd"))
    b.emit(P.Decl(f"{vtype}* const", "cpd", f"reinterpret_cast<{vtype}*>(cpe + m0)"))
    slots = str(-(-int(length) // w)) if length.isdigit() else f"(({length}) + {w - 1}) / {w}"
    # (slot nv, the tail's, is the value-by-value round's: written once)
    each(slots, lambda: b.emit(P.If("e != nv", (P.Set(
        "cpd[e]", f"(e < nv) ? {read('cps', 'e')} : {vzero}"),))))
    zero = f"napkin_from_float<{ctype}>(0.0f)"
    b.emit(P.Block((
        P.Decl(f"const {itype}", "p", f"({itype})(tid < {w} ? tid : tl + tid - {w})"),
        P.If(f"tid < {2 * w} && (tid >= {w} || tid < m0)",
             (P.Set("cpe[p]", f"(p < {nlen}) ? {read('src', 'p')} : {zero}"),)))))
