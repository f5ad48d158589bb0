"""The row pitch of the arrays napkin itself stores between kernels (decided once, per array).

A 16-byte copy (cp.async: the tensor-core tiles' loads, codegen/tiles.py) needs its global
address 16-byte aligned. The launchers align every array's start (Program.alignment), so a
row starts aligned only where its length in bytes is a multiple of 16: cross_entropy's
gradient stores dZ[t v] at v = 50257 f16 values a row, and the products reading it (dH =
dZ * W, dW = dZ * H) copied it one value at a time (8.5 ms each against 3.8 ms aligned,
model, h100). The user's arrays keep the user's strides, but an intermediate napkin stores
and reads back itself is laid out by napkin: its rows are `pitch` values apart, the
contiguous axis's size rounded up to a multiple of PITCH_BYTES (16: cp.async's width and
the widest copy the model prices, copies.VECTOR_BYTES; a 128-byte pitch would only move
where a row's 32-byte sectors fall, which nothing here prices). The padding is never
written nor read: a copy straddling a row's end reads only the row's bytes (cp.async's
src-size, the rest zero-filled: codegen/tile_rows.py), so the bytes moved (H) are the
row's; explain names the padding's bytes (`said`).

Which arrays: those stored in 16 bits for tensor-core products (stored16.py: never an
output, never an input; `pitched` reads that decision) whose every reader reads the array
itself by name (no view, reshape or gather: those address it as dense rows). A CUDA-core
kernel reading one (a cotangent read elementwise too) addresses it at the pitch and sizes
its copies by the row's length as before (copies.py: peeled where no vector divides it).
The decision does not depend on sizes: the pitch equals the size where that is a multiple
already (no padding), and is computed by the same rule at run time for a runtime size
(`pitch_of`: codegen/indexing.pitch, runtime/launches.buffer_shape). It is recorded on
each kernel's model (Model.pitches, made in model.kernel_model), which the cost model
(copies.tensor_values), the lowering (every global offset, codegen/indexing.Layout; the
copies; Program.pitches for the launchers) and explain read.
"""

from __future__ import annotations

from . import ir
from .arrays import BYTES, storage_dtype
from .canonical import through
from .graph import DiGraph

PITCH_BYTES = 16


def pitched(g: DiGraph, n: int) -> int:
    """Values the row pitch of the global array n (through names) is a multiple of, or 0
    where it is dense (see the module docstring)."""
    v = through(g, n)
    # stored16.decided, read from the graph as arrays.storage_dtype does (stored16 imports
    # the model, which imports this module)
    if v not in (g.graph.get("stored16") or {}) or not ir.type_of(g, v).axes:
        return 0
    if not _read_by_name(g, v):
        return 0
    return PITCH_BYTES // BYTES[storage_dtype(g, v)]


def _read_by_name(g: DiGraph, v: int) -> bool:
    """Whether every reader of v, through its names, reads its values at its own positions
    (no view, reshape nor gather of it)."""
    todo, seen = [v], set()
    while todo:
        for u in g.successors(todo.pop()):
            if u in seen:
                continue
            seen.add(u)
            op = ir.op(g, u)
            if isinstance(op, ir.Assign):
                todo.append(u)
            elif isinstance(op, (ir.View, ir.Reshape, ir.Gather)):
                return False
    return True


def pitch_of(size: int, values: int) -> int:
    """The row pitch, in values, of rows `size` values long padded to multiples of `values`
    (0 or 1: dense)."""
    if values <= 1:
        return int(size)
    return -(-int(size) // values) * values


def of(model, n: int) -> int:
    """Values global array n's row pitch is a multiple of in this kernel's model (0: dense)."""
    return dict(model.pitches).get(n, 0)


def extents(g: DiGraph, nodes) -> tuple:
    """(axes, values its pitch is a multiple of or 0) of the global arrays `nodes` (a
    kernel's loads and stores: Model.extents, whose offsets index_width.py bounds)."""
    return tuple((ir.type_of(g, n).axes, pitched(g, n)) for n in nodes)


def kernel_pitches(g: DiGraph, nodes) -> tuple[tuple[int, int], ...]:
    """(node, values its pitch is a multiple of) of the global arrays `nodes` (a kernel's
    loads and stores, as named there and through names) that are pitched."""
    out = {}
    for n in nodes:
        w = pitched(g, n)
        if w:
            out[n] = w
            out[through(g, n)] = w
    return tuple(sorted(out.items()))


def said(plan) -> list[str]:
    """One line per array whose rows the plan pads at its sizes (explain): the pitch, the
    padding, and why."""
    from .arrays import array_name
    g, found = plan.graph, {}
    for kp in plan.kernels:
        for n, values in kp.model.pitches:
            found.setdefault(through(g, n), values)
    out = []
    for v, values in sorted(found.items()):
        axes = ir.type_of(g, v).axes
        size = int(plan.sizes[axes[-1]])
        pitch = pitch_of(size, values)
        if pitch == size:
            continue
        nbytes = BYTES[storage_dtype(g, v)]
        rows = 1
        for a in axes[:-1]:
            rows *= int(plan.sizes[a])
        out.append(f"{array_name(g, v)} rows {pitch:,} values apart in global memory ({axes[-1]} = "
                   f"{size:,} padded to {pitch * nbytes:,} bytes, a multiple of {PITCH_BYTES}): "
                   f"the kernels reading it copy {PITCH_BYTES} bytes at a time "
                   f"({(pitch - size) * nbytes * rows:,} bytes of padding, never read)")
    return out
