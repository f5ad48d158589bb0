"""Shared-memory staging of one kernel: a buffer per staged input (its block tile, or its
chunk of the streamed axis), laid out one after another at 16-byte-aligned offsets, and
the block-wide copy that fills it (coalesced, tails zero-filled)."""

from __future__ import annotations

import math

from ..compiler import ir
from ..compiler.model import BYTES
from . import cexpr, peeled
from . import program as P
from .builder import Ix
from .indexing import Layout

ALIGN = 16   # bytes: every shared-memory buffer starts 16-byte aligned (vector copies)
_CBYTES = {cexpr.CTYPE[d]: BYTES[d] for d in cexpr.CTYPE}
# the C type and zero of a copy of 16, 8 or 4 bytes (compiler/copies.py decides the width)
VECTORS = {16: ("uint4", "make_uint4(0, 0, 0, 0)"), 8: ("uint2", "make_uint2(0, 0)"),
           4: ("unsigned int", "0")}


def stage(lw, n: int) -> None:
    """Copy this block's tile of input n (its chunk, for a streamed one) to shared memory:
    row by row along its inner axis (`_rows`), `Schedule.vector(n)` values a copy, where a
    row is at least as long as the block's threads; else element by element (`_flat`)."""
    name, layout = pointer(lw, n)
    _, dtype = lw.names[n]
    ctype = cexpr.CTYPE[dtype]
    inner = _inner(layout)
    vector = lw.kp.schedule.vector(n)
    if inner is None:
        _flat(lw, n, name, layout, ctype)
        return
    rows = [a for a in layout.axes[:layout.axes.index(inner)] if layout.extents[a] != "1"]
    length = layout.extents[inner]
    if rows and length.isdigit() and int(length) < lw.threads and vector == 1:
        _flat(lw, n, name, layout, ctype)
        return
    size = lw.sizes[inner]
    if vector == 1 or size.isdigit() or lw.kp.schedule.peeled(n):   # (peeled: any size)
        lw.b.emit(P.Block(_scoped(lw, lambda: _rows(lw, n, name, layout, ctype, inner, rows,
                                                      vector))))
        return
    # the plan's width needs the row's size a multiple of it: tested once (a plan may run at
    # other sizes than it was made for), one value a copy where it is not
    lw.b.emit(P.If(f"{size} % {vector} == 0",
                   _scoped(lw, lambda: _rows(lw, n, name, layout, ctype, inner, rows, vector)),
                   _scoped(lw, lambda: _rows(lw, n, name, layout, ctype, inner, rows, 1))))


def pointer(lw, n: int) -> tuple:
    """Name input n's buffer in this scope (allocated on first use): (its name, layout). A
    later pass that reads the chunk an earlier one staged (Schedule.resident) names it
    without copying."""
    if n not in lw.staged:
        _allocate(lw, n)
    name, layout = lw.staged[n]
    ctype = cexpr.CTYPE[lw.names[n][1]]
    offset = next(s.offset for s in lw.smem if s.name == name)
    lw.b.emit(P.Decl(f"{ctype}*", name, f"reinterpret_cast<{ctype}*>(smem + {offset})"))
    return name, layout


def _inner(layout):
    """The axis the copy walks along a row: the last the tile holds more than one of."""
    found = [a for a in layout.axes if layout.extents[a] != "1"]
    return found[-1] if found else None


def _scoped(lw, fn) -> tuple:
    lw.b.open()
    fn()
    return lw.b.close()


def _int(lw, size: str) -> str:
    """A size in the kernel's index type (a runtime size is a `long long` parameter)."""
    return size if size.isdigit() else f"({lw.itype})({size})"


def _rows(lw, n, name, layout, ctype, inner, rows, vector) -> None:
    """For each row of the tile (every position of the axes before the inner one, `eo`, its
    coordinates divided out once), the row's source and destination and the length of it
    inside the array (`nlen`: zero for a row outside it), then the block's threads walk the
    row `vector` values a copy, zeros past `nlen`: no division, one compare, per copy."""
    b = lw.b
    itype = lw.itype
    length = _int(lw, layout.extents[inner])
    count = " * ".join(f"({_int(lw, layout.extents[a])})" for a in rows) or "1"
    vtype, vzero = VECTORS[vector * _CBYTES[ctype]] if vector > 1 else (ctype, None)
    peel = vector > 1 and layout.peel is not None     # (peeled.py: 16 bytes a copy)

    def row():
        scope, checks = {}, []
        rest = "eo"
        for a in reversed(rows):
            local = f"(({rest}) % ({_int(lw, layout.extents[a])}))" if a != rows[0] else rest
            rest = f"(({rest}) / ({_int(lw, layout.extents[a])}))"
            scope[a], check = _coordinate(lw, layout, a, local)
            checks += check
        for a in layout.axes:
            if a not in scope and a != inner:       # one position: the tile's origin
                scope[a], check = _coordinate(lw, layout, a, "0")
                checks += check
        scope[inner], _ = _coordinate(lw, layout, inner, "0")
        # the length of the row inside the array (and the chunk)
        if inner == lw.st.axis:
            limit = "clen"
        elif inner in layout.origins and not layout.inside(inner):
            limit = f"({itype})({lw.sizes[inner]}) - {layout.origins[inner]}"
        else:
            limit = None
        within = length if limit is None else f"({limit} < {length} ? {limit} : {length})"
        if checks:
            within = f"({' && '.join(checks)}) ? {within} : 0"
        b.emit(P.Decl(f"const {itype}", "nlen", f"({itype})({within})" if vector == 1 or peel
                      else f"({itype})({within}) / {vector}"))
        arrays = Layout(layout.axes, lw.sizes, itype, pitch=lw.row_pitch(n))   # (global)
        source = arrays.offset(scope)
        param, _ = lw.names[n]
        if peel:
            at_row = f"{name} + eo * {layout.peel[0]}" if rows else name
            peeled.copy_row(lw, param, source, at_row, "nlen", length, vector, ctype, vtype,
                            vzero, lambda ptr, i: f"__ldcg(&{ptr}[{i}])" if n in lw.coherent
                            else f"{ptr}[{i}]", lambda top, body: _each(lw, top, body))
            return
        b.emit(P.Decl(f"const {vtype}* const", "cps",
                      f"reinterpret_cast<const {vtype}*>({param} + ({source}))"))
        at_row = f"{name} + eo * {length}" if rows else name
        b.emit(P.Decl(f"{vtype}* const", "cpd", f"reinterpret_cast<{vtype}*>({at_row})"))
        stride = arrays.stride(inner)
        at = f"e * ({stride})" if stride else "e"
        read = f"__ldcg(&cps[{at}])" if n in lw.coherent else f"cps[{at}]"
        zero = vzero or f"napkin_from_float<{ctype}>(0.0f)"
        top = length if vector == 1 else f"{length} / {vector}"
        if length.isdigit():
            top = str(int(length) // vector)
        _each(lw, top, lambda: b.emit(P.Set("cpd[e]", f"(e < nlen) ? {read} : {zero}")))
    if not rows:
        row()
        return
    # (rolled: each row's setup once, the copy loop inside it nvcc's to unroll)
    b.loop("eo", "0", count, "1", row, unroll=1, ctype=itype)


def _coordinate(lw, layout, a, local) -> tuple[Ix, list]:
    """The global position of the tile's `local` along axis a, clamped to the array (a row
    past its end computes its source's address all the same, never reading it: within the
    index type), and its in-range tests."""
    origin = layout.origins.get(a)
    at = f"({origin} + {local})" if origin else local
    checks = []
    if a == lw.st.axis:       # (the chunk's length ends at the array's end)
        checks.append(f"{local} < clen")
    elif layout.inside(a):
        return Ix(at), checks
    if origin or not layout.extents[a].isdigit() or a == lw.st.axis:
        if a != lw.st.axis:
            checks.append(f"{at} < {_int(lw, lw.sizes[a])}")
        if local != "0" or a == lw.st.axis:
            top = f"({lw.itype})({lw.sizes[a]} - 1)"
            return Ix(f"({at} < {top} ? {at} : {top})"), checks
    return Ix(at), checks


def _flat(lw, n, name, layout, ctype) -> None:
    """Element by element over the whole tile (rows shorter than the threads, or a single
    value): each thread's element divided out of its flat index in the kernel's index type."""
    b = lw.b

    def body():
        coords, valid = layout.unflatten("e", lw.st.axis, "clen")
        scope = {a: Ix(c) for a, c in coords.items()}
        value = lw.global_at(n, lw.global_layout(n, layout.axes).offset(scope))
        zero = f"napkin_from_float<{ctype}>(0.0f)"
        b.emit(P.Set(f"{name}[e]", f"({valid}) ? {value} : {zero}"))
    extents = [layout.extents[a] for a in layout.axes]
    count = str(math.prod(map(int, extents))) if all(e.isdigit() for e in extents) \
        else layout.count()
    _each(lw, count, body)


def _each(lw, count: str, body) -> None:
    """`body` for e = tid, tid + threads, ... below `count`: an `if` where a constant count is
    within the block's threads (nvcc would compile a loop it cannot know runs once)."""
    b = lw.b
    if count.isdigit() and int(count) <= lw.threads:
        def once():
            b.emit(P.Decl(f"const {lw.itype}", "e", f"({lw.itype})tid"))
            body()
        b.emit(P.If(f"tid < {count}", _scoped(lw, once)))
        return
    b.loop("e", f"({lw.itype})tid" if lw.itype != "int" else "tid", count, f"{lw.threads}",
           body, ctype=lw.itype)


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
    param, dtype = lw.names[n]
    name = f"{lw.smem_prefix}{len(lw.staged)}"
    w = lw.kp.schedule.peeled(n)
    held = dict(extents)
    if w:      # (a peeled row is a pitch long: peeled.py)
        held[axes[-1]] = peeled.pitch(_int(lw, extents[axes[-1]]), w)
    count = " * ".join(f"({held[a]})" for a in axes) or "1"
    lw.smem.append(P.SharedBuffer(name, cexpr.CTYPE[dtype], next_offset(lw.smem), count))
    terms = {a: lw.params[a] if extents[a] == lw.sizes.get(a) else extents[a] for a in axes}
    lw.smem_terms.append(_bytes_term(axes, terms, dtype))
    if w:     # (what the pitch adds: a vector and the rounding up, bounded by two vectors)
        lw.smem_terms.append(_bytes_term(axes[:-1], dict(terms), dtype, 2 * w))
    origins = {a: lw._axis_var("org", a) for a in axes if a in lw.tile}
    if lw.st.axis in axes:
        origins[lw.st.axis] = "c0"
    peel = (held[axes[-1]], peeled.head(param, lw.global_layout(n, axes),
                                       origins.get(axes[-1], "0"), BYTES[dtype])) if w else None
    lw.staged[n] = (name, Layout(axes, lw.sizes, lw.itype, extents, origins,
                                 aligned=lw.grid_origins, peel=peel))


def next_offset(smem: list) -> str:
    if not smem:
        return "0"
    last = smem[-1]
    return (f"((({last.offset}) + ({last.count}) * {_CBYTES[last.ctype]} + {ALIGN - 1}) "
            f"/ {ALIGN} * {ALIGN})")


def _bytes_term(axes, extents, dtype, values=1):
    """(constant bytes, runtime size params...) of one buffer (of `values` values at each of
    its positions); each buffer starts at a multiple of ALIGN bytes, so the program reserves
    ALIGN - 1 more per buffer."""
    factor, params = BYTES[dtype] * values, []
    for a in axes:
        e = extents[a]
        if e.isdigit():
            factor *= int(e)
        else:
            params.append(e)
    return (factor,) + tuple(params)
