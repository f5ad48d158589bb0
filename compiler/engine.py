"""Buffers of a kernel whose contractions run on a fixed-shape tensor-core engine.

This is the paper's section 5 made into rules, for targets whose tensor cores
only compute m x k . k x n -> m x n and whose results reach the threads through
shared memory (`hopper-toy`):

- every contraction runs as fragments: primary m x k, secondary k x n,
  accumulator m x n, in registers (one set, reused by every contraction);
- a primary operand that the streaming loop does not touch (attention's
  queries) is held in registers, w x k-extent, w being the rows the engine
  covers; a primary operand the threads produce (probabilities) reaches the
  engine u at a time (u = the engine's k), as the threads' processed values;
- streamed operands share one shared-memory stream buffer (s x the rest);
  a secondary operand whose contracted axis is its contiguous one is copied
  transposed first, so the engine reads it k-major;
- a result reaches the threads through shared memory: a transfer cache when
  the engine's n covers it, else a subloop cache of n-wide slices;
- the threads keep, per row they own (t of them, left symbolic), the online
  softmax state (max, sum, rescale factor) and the output accumulator.
"""

from __future__ import annotations

from . import ir
from .canonical import through
from .model import BYTES, storage_dtype


def engine_for(target, kp):
    """The engine these rules apply to, or None."""
    for e in target.engines:
        if "contraction" in e.computes and e.results_at != target.levels[-1].name:
            return e
    return None


def engine_buffers(plan, kp) -> list[dict] | None:
    g, target, sizes = plan.graph, plan.target, plan.sizes
    eng = engine_for(target, kp)
    contractions = [n for n in kp.kernel.nodes if isinstance(ir.op(g, n), ir.Contract)]
    if eng is None or not contractions:
        return None
    m, n_frag, k_frag = eng.shapes[0]
    smem, regs = target.levels[1].name, target.levels[-1].name
    group = kp.schedule.block_tile()
    # what one block covers of each axis: a batch axis grouped by 1 is one position, not a
    # dimension of any buffer (only the stream's chunk and the block's tiles are)
    sizes = {**sizes, **group}
    stream_axis, chunk = kp.schedule.stream if kp.schedule.stream else (None, None)
    rows = [a for a in kp.model.woven if group[a] > 1]
    row = rows[0] if rows else None
    row_tile = group[row] if row else 1
    loads = set(kp.kernel.loads)
    out: list[dict] = []

    def add(name, role, shape, level, width=4):
        count = 1
        for _, s in shape:
            count *= s if s is not None else 1
        out.append({"name": name, "role": role, "shape": shape, "level": level,
                    "bytes": count * width if all(s is not None for _, s in shape) else None})

    def bytes_of(n):          # bytes per value of a loaded array (results are f32)
        return BYTES[storage_dtype(g, n)] if n in loads else 4
    operand_width = 4

    stream_extent = 0
    stream_names = []
    for c in contractions:
        op = ir.op(g, c)
        a, b = (through(g, x) for x in ir.operands(g, c))
        primary, secondary = (a, b) if row and row in ir.type_of(g, a).axes else (b, a)
        red = op.axes
        for operand in (primary, secondary):
            t = ir.type_of(g, operand)
            if operand in loads and stream_axis in t.axes:
                stream_names.append(_name(g, operand))
                other = [x for x in t.axes if x != stream_axis and sizes[x] > 1]
                extent = 1
                for x in other:
                    extent *= sizes[x]
                stream_extent = max(stream_extent, extent)
        pt = ir.type_of(g, primary)
        if operand_width == 4 and (primary in loads or secondary in loads):
            operand_width = bytes_of(primary if primary in loads else secondary)
        if primary in loads and stream_axis not in pt.axes:
            add(_name(g, primary), "tensor core primary source",
                _row("w", row, row_tile) + [[x, sizes[x]] for x in red], regs, bytes_of(primary))
        elif primary not in loads:
            add(_name(g, primary), "processed values",
                _row("t", row, None) + [[f"u_{stream_axis}", k_frag]], regs)
        st = ir.type_of(g, secondary)
        if secondary in loads and st.axes and st.axes[-1] in red:
            other = [x for x in st.axes if x not in red and sizes[x] > 1]
            add(_name(g, secondary) + "^T", "transposed",
                [[x, sizes[x]] for x in red] + [[_lab(x, stream_axis), _ext(x, stream_axis, chunk, sizes)]
                                                for x in other], smem, bytes_of(secondary))
        free = [x for x in ir.type_of(g, c).axes if x != row and sizes[x] > 1]
        width = 1
        for x in free:
            width *= _ext(x, stream_axis, chunk, sizes)
        name = _name(g, c)
        if width <= n_frag:
            add(name, "transfer cache", _row("g", row, row_tile)
                + [[_lab(x, stream_axis), _ext(x, stream_axis, chunk, sizes)] for x in free], smem)
        else:
            add(name, "subloop cache", _row("g", row, row_tile)
                + [[f"{x}'", n_frag] for x in free[-1:]], smem)
    if stream_names:
        add("/".join(dict.fromkeys(stream_names)), "stream",
            [[f"s_{stream_axis}", chunk]] + _rest(kp, stream_axis, sizes, plan), smem,
            max(bytes_of(n) for n in kp.kernel.loads if stream_axis in ir.type_of(g, n).axes))
    add("F", "tensor core primary", [["m", m], ["k", k_frag]], regs, operand_width)
    add("G", "tensor core secondary", [["k", k_frag], ["n", n_frag]], regs, operand_width)
    add("H", "tensor core accumulator", [["m", m], ["n", n_frag]], regs)
    for s, cn in kp.model.streaming.pairs:
        out_axes = [x for x in ir.type_of(g, cn).axes if x != row and sizes[x] > 1]
        name = _name(g, cn)
        add(name + ".state", "auxiliary", _row("t", row, None) + [["m l rescale", 3]], regs)
        add(name, "output", _row("t", row, None) + [[x, sizes[x]] for x in out_axes], regs)
    return out


def _row(prefix: str, row, tile) -> list:
    """The rows' dimension of a buffer (`g_q`, `t_q`, `w_q`), none where no woven axis of the
    kernel is grouped beyond 1 (a bilinear form's second kernel: one output per block)."""
    return [] if row is None else [[f"{prefix}_{row}", tile]]


def _rest(kp, stream_axis, sizes, plan):
    g = plan.graph
    best = []
    for n in kp.kernel.loads:
        t = ir.type_of(g, n)
        if stream_axis in t.axes:
            rest = [[x, sizes[x]] for x in t.axes if x != stream_axis and sizes[x] > 1]
            if len(rest) > len(best) or sum(s for _, s in rest) > sum(s for _, s in best):
                best = rest
    return best


def _lab(axis, stream_axis):
    return f"s_{axis}" if axis == stream_axis else axis


def _ext(axis, stream_axis, chunk, sizes):
    return chunk if axis == stream_axis else sizes[axis]


def _name(g, n) -> str:
    from .model import array_name
    return array_name(g, n)
