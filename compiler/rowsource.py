"""Row sources: the rows of a streamed tile read from a loaded array at computed positions.

A tensor-core kernel stages a chunk of keys of K and V as tiles (codegen/tiles.py). Where
K is a loaded array, key x's row sits at x along its axis. Two forms read the row
elsewhere, and are the same idea: the row of the array is a function of the key and of the
block's batch axes, computed once per row of the chunk, and the row's values are
contiguous along the tile's inner axis (copied 16 bytes at a time):

- a split's window (compiler/split.py, SplitInfo.windows): the base's row along x is
  p_x * size(s_x) + s_x, and the rows past x are zeros (the split's last chunks);
- a gather (`Kc[pages[b (x // size(P))] mod(x, size(P)) g d]`: a paged cache): along each
  of the base's axes either an axis of the kernel read as it is (a batch axis, the key
  axis, or the tile's inner axis dk / dv, which must be the base's contiguous one) or a
  position computed from the key and the batch axes by elementwise integer ops, indices,
  sizes and reads of loaded arrays at such positions (the page table `pages[b j]`). In a
  split the key is p_x * size(s_x) + s_x and the rows past x are zeros too (the split
  clamps the positions' x, so that what they read is inside their arrays).

`of(g, n, ...)` says which (a RowSource), or why the copy cannot take it (a string).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ir
from .split_info import infos

# what a computed position may be made of (besides loads and reads of them at positions
# of the same kind): evaluated by the scalar emitter once per row of the chunk
_POSITION_OPS = (ir.Map, ir.Assign, ir.Const, ir.Index, ir.SizeOf)


@dataclass(frozen=True)
class RowSource:
    node: int                               # the operand the tile holds (gather or window)
    base: int                               # the loaded array its rows are copied from
    labels: tuple[str | None, ...]          # per axis of the base: the kernel's axis read as
                                            # it is, or None: a computed position
    positions: tuple[int | None, ...]       # per None label: the node computing it (None: a
                                            # window's row p_x * size(s_x) + s_x)
    split: tuple[str, str, str] | None      # (x, p_x, s_x): rows past x are zeros
    reads: tuple[int, ...] = ()             # the loads the positions read (a page table)

    @property
    def computed(self) -> bool:
        """Whether a row's position is computed from data or ops (not a window's row)."""
        return any(p is not None for p in self.positions)


def of(g, n: int, loads, members, key: str, inner: str, batch) -> RowSource | str | None:
    """The row source of operand n of a tile over `key` (the streamed axis) and `inner` (its
    contiguous axis), in a kernel whose blocks hold one position of each of `batch`; None
    when n is no window or gather of a load; why not (a string) when the copy cannot read
    it (a position along `inner`, one that depends on other axes, a base whose contiguous
    axis is not `inner`)."""
    op = ir.op(g, n)
    if not isinstance(op, ir.Gather) or ir.operands(g, n)[0] not in loads:
        return None
    info = next((i for i in infos(g) if n in i.windows), None) or \
        next((i for i in infos(g) if key == i.share_axis), None)
    base, *indices = ir.operands(g, n)
    split = (info.axis, info.part_axis, info.share_axis) if info is not None and \
        key == info.share_axis else None
    axes = ir.type_of(g, base).axes
    name = _name(g, base)
    if info is not None and n in info.windows:
        return RowSource(n, base, op.labels, (None,), split)
    allowed = set(batch) | {key} | ({split[1]} if split else set())
    if op.labels[-1] != inner or inner in op.labels[:-1]:
        return (f"`{name}` is gathered along `{inner}` or not read along its contiguous axis "
                f"as `{inner}`: a tile's rows are copied 16 bytes at a time")
    for label in op.labels:
        if label is not None and label not in allowed | {inner}:
            return f"`{name}` is read along `{label}`, which the tile of keys does not hold"
    reads: set = set()
    for m in indices:
        why = _position(g, m, set(members), set(loads), allowed, reads)
        if why:
            return f"a position `{name}` is gathered at {why}"
    if len(axes) != len(op.labels):        # (the IR's invariant)
        return f"`{name}` is gathered at {len(op.labels)} positions of {len(axes)}"
    return RowSource(n, base, op.labels, tuple(indices), split, tuple(sorted(reads)))


def _position(g, m: int, members: set, loads: set, allowed: set, reads: set) -> str | None:
    """Why node m cannot be computed once per row of a chunk (None: it can): it must be made
    of elementwise ops, indices and sizes, and reads of loaded arrays at such positions, over
    the key and batch axes only. The loads read are added to `reads`."""
    stack, seen = [m], set()
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        axes = set(ir.type_of(g, u).axes)
        if not axes <= allowed:
            extra = sorted(axes - allowed)[0]
            return f"positions that vary along `{extra}` (a row is one per key of the block)"
        if u in loads:
            reads.add(u)
            continue
        op = ir.op(g, u)
        if isinstance(op, (ir.Gather, ir.View)) and ir.operands(g, u)[0] in loads:
            reads.add(ir.operands(g, u)[0])
            stack.extend(ir.operands(g, u)[1:])
            continue
        if not isinstance(op, _POSITION_OPS) or u not in members and not _free(g, u):
            return f"positions computed by `{type(op).__name__.lower()}` (rows are copied " \
                "from positions of elementwise ops of the key, batch axes and loads)"
        stack.extend(ir.operands(g, u))
    return None


def _free(g, n: int) -> bool:
    from .kernels import is_free
    return is_free(g, n)


def _name(g, base: int) -> str:
    op = ir.op(g, base)
    return getattr(op, "name", f"%{base}")


def nodes(g, source: RowSource) -> set:
    """The nodes computing a row source's positions (the gather included): what the lowering
    evaluates per row of the chunk, not per element of the kernel."""
    out, stack = {source.node}, [p for p in source.positions if p is not None]
    while stack:
        u = stack.pop()
        if u in out:
            continue
        out.add(u)
        stack.extend(ir.operands(g, u))
    return out


def window(g, n: int) -> RowSource | None:
    """A split's window as a row source (SplitInfo.windows), else None."""
    info = next((i for i in infos(g) if n in i.windows), None)
    if info is None:
        return None
    return RowSource(n, ir.operands(g, n)[0], ir.op(g, n).labels, (None,),
                     (info.axis, info.part_axis, info.share_axis))


__all__ = ["RowSource", "of", "nodes", "window"]
