"""Streaming one axis through a kernel: which ops run per chunk, in which pass.

Streaming axis r feeds the kernel's arrays to it in chunks along r. Ops whose
result still has r run once per chunk; ops that reduce r (sums, maxima,
contractions over r, softmax statistics) accumulate chunk by chunk and are
final after the pass. An op that needs both a finished reduction and the
chunks of r again (layernorm's `X - mean[c](X)`) must wait for another pass
over r: its inputs are streamed again and its per-chunk operands recomputed.
A softmax over r whose only use is a contraction over r streams in one pass
with the online-softmax accumulator (FlashAttention); used otherwise it needs
two passes (statistics, then normalisation). This is the paper's fusion
theorem, made into a schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph import DiGraph

from . import ir, row_state
from .canonical import through
from .kernels import FusedKernel


@dataclass(frozen=True)
class Streaming:
    axis: str | None
    passes: int                                   # passes over the axis (1 when nothing streams)
    per_chunk: tuple[frozenset[int], ...]         # per pass: nodes with the axis computed per chunk
    loads: tuple[frozenset[int], ...]             # per pass: loads with the axis streamed in
    reducers: tuple[tuple[int, int], ...]         # (node, pass it accumulates in)
    pairs: tuple[tuple[int, int], ...]            # (softmax node, contraction it streams into)
    stats: tuple[tuple[int, int], ...]            # (unpaired softmax node, pass of its statistics)

    def reducer_pass(self) -> dict[int, int]:
        return dict(self.reducers)


def one_chunk(size, chunk):
    """Whether a stream's one chunk holds its whole axis (a number, or per candidate of a set;
    False where sympy cannot tell): a kernel of several passes then stages each streamed load
    once, in the first pass that reads it, and the later passes read that staged chunk
    (Schedule.resident: the lowering's choice, the cost model's H at the block level)."""
    if isinstance(chunk, np.ndarray) or isinstance(size, np.ndarray):
        return np.asarray(chunk) >= size
    try:
        return bool(chunk >= size)
    except TypeError:          # (a relation of sympy symbols it cannot decide)
        return False


def staged_once(model, warps, sizes: dict, stream):
    """Whether a CUDA-core kernel (no `warps`) of several passes stages its streamed loads
    once (`one_chunk`; per candidate of a set): the one decision Schedule.resident records,
    the lowering's later passes follow and the cost model's block-level H counts. Not where
    a mask may skip or shift the chunk (its first pass might not stage it), nor where a
    contraction runs along the streamed axis (attention streaming d: kept as it was priced
    and tested; the rows of softmax, norms and logsumexps are what this serves)."""
    streaming = model.streaming
    if streaming.passes <= 1 or not stream or warps or model.mask is not None:
        return False
    if any(w.op == "contract" and stream[0] in w.axes for w in model.work):
        return False
    return one_chunk(sizes[stream[0]], stream[1])


def global_passes(passes: int, once, where):
    """The passes that read a staged streamed load from global memory: every pass using it,
    or one where its chunk is staged once (`staged_once`, per candidate: `where` selects)."""
    if passes <= 1 or once is False:
        return passes
    return where(once, 1, passes)


def carries(g: DiGraph, n: int, axis: str) -> bool:
    return axis in ir.type_of(g, n).axes


def reduces(g: DiGraph, n: int, axis: str) -> bool:
    op = ir.op(g, n)
    return isinstance(op, (ir.Contract, ir.Reduce)) and axis in op.axes


def softmax_pairs(g: DiGraph, k: FusedKernel, axis: str, woven=None) -> dict[int, int]:
    """Softmax nodes over `axis` whose only use (through names) is a contraction over it and
    over every axis the softmax normalises (one it keeps, the output's rows would need the
    statistics of other rows: the softmax then streams in two passes). Its rows must be woven:
    a pair keeps one running max and sum per thread's row, where a row axis the kernel reduces
    elsewhere (self-attention's gradient fused whole at one token) is a loop inside the state.
    `woven`: k.woven(g) where the caller has it."""
    members, stores = set(k.nodes), set(k.stores)
    woven = set(k.woven(g) if woven is None else woven)
    pairs = {}
    for n in k.nodes:
        op = ir.op(g, n)
        if isinstance(op, ir.Softmax) and op.axes == (axis,):   # (the online softmax's
            users = _users(g, n, members, stores)              # lowering keeps one axis)
            # (a contraction: the lowering's online softmax rescales a product's running sum;
            # a plain sum of probabilities streams their statistics in a pass of their own,
            # but a row's sum or maximum of P beside the product is the final state's:
            # row_state.py)
            users = users and [u for u in users if row_state.statistic(
                g, u, ir.operands(g, n)[0], op.axes, n) is None]
            if users is not None and len(users) == 1 and reduces(g, users[0], axis) \
                    and isinstance(ir.op(g, users[0]), ir.Contract) \
                    and set(op.axes) <= set(ir.op(g, users[0]).axes) \
                    and set(ir.type_of(g, n).axes) - set(op.axes) <= woven:
                pairs[n] = users[0]
    return pairs


def _users(g: DiGraph, n: int, members: set[int], stores: set[int]) -> list[int] | None:
    """Consumers of n, looking through names; None if n (or a name of it) leaves the kernel."""
    users, frontier = [], [n]
    while frontier:
        u = frontier.pop()
        if u in stores:
            return None
        for v in g.successors(u):
            if v not in members:
                return None
            if isinstance(ir.op(g, v), ir.Assign) and through(g, v) == through(g, u):
                frontier.append(v)
            else:
                users.append(v)
    return users


def stream(g: DiGraph, k: FusedKernel, axis: str | None, woven=None) -> Streaming:
    """The pass structure of kernel `k` when `axis` is streamed (None: nothing streams;
    `woven`: k.woven(g) where the caller has it)."""
    if axis is None:
        return Streaming(None, 1, (frozenset(),), (frozenset(),), (), (), ())
    pairs = softmax_pairs(g, k, axis, woven)
    paired_contracts = set(pairs.values())
    members = set(k.nodes)
    pass_of: dict[int, int] = {}     # axis-carrying node -> pass it is first computable in
    avail: dict[int, int] = {}       # node without the axis -> first pass it can be used in
    reducers: dict[int, int] = {}
    stats: dict[int, int] = {}
    for n in k.loads:
        (pass_of if carries(g, n, axis) else avail)[n] = 0
    for n in k.nodes:
        args = ir.operands(g, n)
        need = max([pass_of[m] if m in pass_of else avail.get(m, 0) for m in args], default=0)
        op = ir.op(g, n)
        if n in pairs:                      # streams inside its contraction's accumulator
            pass_of[n] = need
        elif isinstance(op, ir.Softmax) and axis in op.axes:
            stats[n] = need                 # statistics in this pass, values in the next
            pass_of[n] = need + 1
        elif reduces(g, n, axis) or n in paired_contracts:
            reducers[n] = need
            avail[n] = need + 1
        elif carries(g, n, axis):
            pass_of[n] = need
        else:
            avail[n] = need
    last = max(list(reducers.values()) + list(stats.values())
               + [pass_of[n] for n in k.stores if n in pass_of] + [0])
    per_chunk, loads = [], []
    for p in range(last + 1):
        roots = [m for n, q in reducers.items() if q == p for m in ir.operands(g, n) if m in pass_of]
        roots += [ir.operands(g, n)[0] for n, q in stats.items() if q == p]
        roots += [n for n in k.stores if pass_of.get(n) == p]
        closure = _closure(g, roots, pass_of)
        per_chunk.append(frozenset(c for c in closure if c in members))
        loads.append(frozenset(c for c in closure if c not in members))
    return Streaming(axis, last + 1, tuple(per_chunk), tuple(loads), tuple(sorted(reducers.items())),
                     tuple(sorted(pairs.items())), tuple(sorted(stats.items())))


def _closure(g: DiGraph, roots: list[int], pass_of: dict[int, int]) -> set[int]:
    """Axis-carrying nodes needed (recomputed if need be) to produce `roots`."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in seen or n not in pass_of:
            continue
        seen.add(n)
        for m in ir.operands(g, n):
            if m in pass_of:
                stack.append(m)
    return seen

