"""Kernels: sets of IR ops that run as one GPU kernel, and the roles of their axes.

A kernel reads its `loads` (inputs, or arrays an earlier kernel stored) from
global memory and writes its `stores`. Within it an axis is *woven* when every
stored array has it and no op reduces it: such axes can be grouped (split
across blocks). An axis some op sums, maximises or normalises over is
*reduced*: it is kept whole or streamed through an accumulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import DiGraph, ancestors

from . import ir
from .split_info import infos

FREE_LEAVES = (ir.Const, ir.Index, ir.SizeOf)


@dataclass(frozen=True)
class FusedKernel:
    """A kernel as fusion defines it: the IR nodes it computes, what it loads and stores (the
    runnable object napkin.compile returns is napkin.kernel.Kernel)."""

    name: str                    # generated: k0, k1, ...
    nodes: tuple[int, ...]       # ops computed here, topological (free leaves included)
    loads: tuple[int, ...]       # nodes read from global memory
    stores: tuple[int, ...]      # nodes written to global memory
    equations: tuple[int, ...]   # statement indices fused here
    # why the kernel ends where it does (explain): a str, or a Reason computed when first read
    # (`reason`); not hashed, compared by its text
    why: object = field(default="", hash=False)
    recomputed: tuple[int, ...] = ()   # of `equations`, those another kernel also computes
                                       # and stores: computed here from this kernel's loads
                                       # instead of loaded (fuse.py: recomputation)

    @property
    def reason(self) -> str:
        return str(self.why)

    def axes(self, g: DiGraph) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for n in self.loads + self.nodes:
            seen.update(dict.fromkeys(ir.type_of(g, n).axes))
            op = ir.op(g, n)
            if isinstance(op, (ir.Index, ir.SizeOf)):
                seen[op.axis] = None
        return tuple(seen)

    def reduced(self, g: DiGraph) -> tuple[str, ...]:
        """Axes some op of this kernel reduces or normalises over."""
        out: dict[str, None] = {}
        for n in self.nodes:
            op = ir.op(g, n)
            if isinstance(op, (ir.Contract, ir.Reduce, ir.Softmax)):
                out.update(dict.fromkeys(op.axes))
        return tuple(out)

    def woven(self, g: DiGraph) -> tuple[str, ...]:
        """Axes that can be grouped: in every stored array, reduced nowhere here. A split's
        partial state over rows only (O.lse beside O.part's value axis), and its merge over
        the splits (L = logsumexp[p_x](O.lse) beside O in the merge kernel), do not count:
        the tiles along an axis it lacks each compute its value, equal (the model's redo),
        and write it (docs/splits.md)."""
        reduced = set(self.reduced(g))
        states = row_states(g, self.stores)
        stored = [set(ir.type_of(g, n).axes) for n in self.stores if n not in states]
        return tuple(a for a in self.axes(g)
                     if a not in reduced and stored and all(a in s for s in stored))


def row_states(g: DiGraph, stores) -> frozenset:
    """Of `stores`, a split's partial states (SplitInfo.partials), or merges over p_x of
    those alone (_merged_rows), whose axes another of `stores` has all of: O.lse [p_x b h q]
    beside O.part [p_x b h q e]; L [b h q] beside O [b h q e] in the merge kernel (with d
    whole there, paged GQA decode's merge of O and L, b=1 g=8 r=4 x=1024 d=128 split by 16,
    had 16 blocks, 2% of the SMs busy: 9.1 us; d in 8-wide tiles 3.2 us, h100 model)."""
    arrays = g.graph["arrays"]
    axes = {n: set(ir.type_of(g, n).axes) for n in stores}
    out: set = set()
    for info in infos(g):            # (each split of several: kernel_split.py)
        partial = {arrays[name] for name in info.partials if name in arrays}
        out |= {n for n in stores if (
            n in partial or _merged_rows(g, n, partial, info.part_axis)) and any(
            m != n and axes[n] < axes[m] for m in stores)}
    return frozenset(out)


def _merged_rows(g: DiGraph, n: int, partial: set, part_axis: str) -> bool:
    """Whether stored `n` is computed from the split's partial states `partial` over its own
    axes and p_x alone (no input, no other axis between them and `n`): a merge of row
    states, cheap to compute again in every tile along an axis it lacks."""
    up = set(ancestors(g, n))
    before: set = set()
    for v in partial & up:
        before |= set(ancestors(g, v)) | {v}
    rows = set(ir.type_of(g, n).axes) | {part_axis}
    return bool(partial & up) and all(
        set(ir.type_of(g, v).axes) <= rows and not isinstance(ir.op(g, v), ir.Input)
        for v in up - before)


def relabelled(g: DiGraph, k: FusedKernel, held=()) -> frozenset:
    """Axes a view in the kernel reads at another axis's position of a value the kernel
    computes, and the axes whose index it reads them at (`E7[k j j]` reads E7's `i` at `j`'s
    index: both): a thread holds such a value for its own positions only, and a lane split
    makes an index a lane's slot, so no reduced one of them may be split over lanes. Only
    views of values that come from `held` (the streamed reductions, whose per-thread states
    run over those axes) count."""
    nodes, held = set(k.nodes), set(held)
    out = set()
    for n in k.nodes:
        op = ir.op(g, n)
        if isinstance(op, ir.View) and ir.operands(g, n)[0] in nodes and \
                held & (ancestors(g, ir.operands(g, n)[0]) | {ir.operands(g, n)[0]}):
            for a, label in zip(ir.type_of(g, ir.operands(g, n)[0]).axes, op.labels):
                if a != label:      # the position of `a` indexed by `label`'s index
                    out.update((a, label))
    return frozenset(out)


def is_free(g: DiGraph, n: int, memo: dict | None = None) -> bool:
    """Constants, sizes, axis indices and arithmetic on them only: recomputed wherever used.
    `memo` (node -> answer, for one graph as it is) spares re-walking shared subexpressions."""
    if memo is not None and n in memo:
        return memo[n]
    op = ir.op(g, n)
    free = isinstance(op, FREE_LEAVES) or (
        isinstance(op, ir.Map) and all(is_free(g, m, memo) for m in ir.operands(g, n)))
    if memo is not None:
        memo[n] = free
    return free


class Reason:
    """A kernel's boundary reason, made when first read: fusion prices many layouts and
    plans several fusions (merged or not, specialised or not) of which a plan keeps one,
    and only `explain` reads why its kernels end where they do (boundaries._reasons plans the
    fused neighbours for it)."""

    __slots__ = ("_make", "_text")

    def __init__(self, make):
        self._make, self._text = make, None

    def __str__(self) -> str:
        if self._text is None:
            self._text, self._make = self._make(), None
        return self._text

    def __eq__(self, other) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __repr__(self) -> str:
        return repr(str(self))

    def __reduce__(self):         # (pickled or copied: its text)
        return str, (str(self),)


def fused_kernel(g: DiGraph, name: str, members: set[int], reason: str = "",
                 needed: set[int] | frozenset | None = None,
                 recomputed: tuple[int, ...] = ()) -> FusedKernel:
    """A kernel from the ops in `members`; the free expressions they use are added.

    It stores what an op outside it reads, and the outputs. Kernels that overlap (a statement
    computed in two of them) say instead which nodes each stores: `needed`, the members that
    a kernel not computing them reads or that are outputs this kernel owns (fuse.py decides
    which kernel owns what); `recomputed` names the statements it computes but does not own.
    """
    free: dict = {}
    members = {n for n in members if not is_free(g, n, free)}
    stack = [u for n in members for u in g.predecessors(n)]
    while stack:
        u = stack.pop()
        if u not in members and is_free(g, u, free):
            members.add(u)
            stack.extend(g.predecessors(u))
    outputs = set(g.graph["outputs"].values())
    loads = sorted({u for n in members for u in g.predecessors(n) if u not in members})
    if needed is None:
        stores = sorted(n for n in members
                        if any(v not in members or v in outputs for v in g.successors(n))
                        and not is_free(g, n, free))
    else:
        stores = sorted(n for n in members if n in needed and not is_free(g, n, free))
    order = [n for n in ir.order(g) if n in members]
    stmts = sorted({g.nodes[n]["stmt"] for n in members
                    if g.nodes[n]["stmt"] is not None and not is_free(g, n, free)})
    return FusedKernel(name, tuple(order), tuple(loads), tuple(stores), tuple(stmts), reason,
                       tuple(sorted(recomputed)))



def check_stores(g: DiGraph, kernels) -> None:
    """Kernels in launch order, overlapping or not: every node is stored by at most one
    kernel, what a kernel loads is an input or stored by an earlier kernel, and every output
    is stored (an internal error otherwise: napkin's bug, never the diagram's)."""
    stored: dict[int, str] = {}
    for k in kernels:
        for u in k.loads:
            if not isinstance(ir.op(g, u), ir.Input) and u not in stored:
                raise AssertionError(f"kernel {k.name} loads node {u}, which no earlier kernel "
                                     "stores")
        for n in k.stores:
            if n in stored:
                raise AssertionError(f"node {n} is stored by kernels {stored[n]} and {k.name}")
            stored[n] = k.name
    for name, o in g.graph["outputs"].items():
        for u in g.predecessors(o):
            if not isinstance(ir.op(g, u), ir.Input) and u not in stored:
                raise AssertionError(f"output {name} (node {u}) is stored by no kernel")
