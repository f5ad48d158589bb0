"""A gather's reads on the CPU backends: its positions in the base's order, the read itself
(checked against each axis, or clamped to the nearest row as the emitted CUDA reads), and
N0407 naming the position, its value and where it was computed."""

from __future__ import annotations

import numpy as np

from ..compiler import ir
from ..diagrams.diagnostics import error
from . import elementwise


def gathered(g, n: int, base: np.ndarray, labels, index: list, ranges: list,
             clamp: bool = False) -> np.ndarray:
    """Gather node n: `base` at the computed `index` arrays (in order) and the `ranges` of its
    labelled positions (all aligned to the result's axes); an index out of its axis is N0407
    at the gather's span, naming the position, the index and where it was computed. With `clamp`, such a read takes
    the nearest row instead (runtime/unused_reads.py decides whether its value is used)."""
    try:
        return elementwise.gather(base, positions(labels, index, ranges), clamp)
    except elementwise.OutOfRange as exc:
        raise out_of_range(g, n, labels, *exc.args) from None


def positions(labels, index: list, ranges: list) -> list:
    """A gather's positions in the base's order: computed ones from `index`, named ones from
    `ranges`."""
    it, rt = iter(index), iter(ranges)
    return [next(rt) if lab is not None else next(it) for lab in labels]


def out_of_range(g, n: int, labels, k: int, value: int, size: int, at: tuple):
    """N0407 at gather n: its position k is `value` at point `at` of the result."""
    out_axes = ir.type_of(g, n).axes
    base_node, *index_nodes = ir.operands(g, n)
    name = array_name(g, base_node)
    axis = ir.type_of(g, base_node).axes[k]
    varies = ir.type_of(g, index_nodes[labels[:k].count(None)]).axes   # the index's axes
    shown = ", ".join(f"{a}={int(i)}"
                      for a, i in zip(out_axes, at) if a in varies)
    return error("N0407", f"the position read along dimension {k} of `{name}` is {value} at "
                 f"{shown or 'every point'}, outside its axis `{axis}` of size {size}",
                 g.nodes[n]["span"],
                 help=f"a gathered position must be in 0..{size - 1}; check the index "
                      "arrays (on a GPU such a read is clamped to the nearest row)",
                 source=g.graph["source"])


def array_name(g, n: int) -> str:
    """The name of the array node n holds (an input's, an equation's; else `%n`)."""
    if getattr(ir.op(g, n), "name", None):
        return ir.op(g, n).name
    for name, m in g.graph["arrays"].items():
        if m == n:
            return name
    return f"%{n}"
