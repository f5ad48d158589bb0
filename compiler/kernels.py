"""Kernels: sets of IR ops that run as one GPU kernel, and the roles of their axes.

A kernel reads its `loads` (inputs, or arrays an earlier kernel stored) from
global memory and writes its `stores`. Within it an axis is *woven* when every
stored array has it and no op reduces it: such axes can be grouped (split
across blocks). An axis some op sums, maximises or normalises over is
*reduced*: it is kept whole or streamed through an accumulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from . import ir

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
    reason: str = ""             # why the kernel ends where it does (explain)

    def axes(self, g: nx.DiGraph) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for n in self.loads + self.nodes:
            seen.update(dict.fromkeys(ir.type_of(g, n).axes))
            op = ir.op(g, n)
            if isinstance(op, (ir.Index, ir.SizeOf)):
                seen[op.axis] = None
        return tuple(seen)

    def reduced(self, g: nx.DiGraph) -> tuple[str, ...]:
        """Axes some op of this kernel reduces or normalises over."""
        out: dict[str, None] = {}
        for n in self.nodes:
            op = ir.op(g, n)
            if isinstance(op, (ir.Contract, ir.Reduce, ir.Softmax)):
                out.update(dict.fromkeys(op.axes))
        return tuple(out)

    def woven(self, g: nx.DiGraph) -> tuple[str, ...]:
        """Axes that can be grouped: in every stored array, reduced nowhere here."""
        reduced = set(self.reduced(g))
        stored = [set(ir.type_of(g, n).axes) for n in self.stores]
        return tuple(a for a in self.axes(g)
                     if a not in reduced and all(a in s for s in stored))


def is_free(g: nx.DiGraph, n: int, memo: dict | None = None) -> bool:
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


def fused_kernel(g: nx.DiGraph, name: str, members: set[int], reason: str = "") -> FusedKernel:
    """A kernel from the ops in `members`; the free expressions they use are added."""
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
    stores = sorted(n for n in members
                    if any(v not in members or v in outputs for v in g.successors(n))
                    and not is_free(g, n, free))
    order = [n for n in ir.order(g) if n in members]
    stmts = sorted({g.nodes[n]["stmt"] for n in members
                    if g.nodes[n]["stmt"] is not None and not is_free(g, n, free)})
    return FusedKernel(name, tuple(order), tuple(loads), tuple(stores), tuple(stmts), reason)


