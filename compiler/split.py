"""Split reductions: a reduced axis grouped across blocks, its partial states merged after.

`x -> p_x splits x s_x` relabels a reduced axis `x` of size X as two axes: `p_x`
(P splits, static) and `s_x` (each split's share, ceil(X / P), derived from X at
run time), with x = p_x * size(s_x) + s_x. Every array that carries x before
its reductions is retyped to carry (p_x, s_x) in x's place; arrays enter the
split region through a gather at the clamped position (positions past X, in
the last splits, read row X - 1 and are masked out). Each reduction over x
becomes a partial reduction over s_x (the accumulator's state, per split) and
a merge over p_x, written as ordinary ops of the IR, so that fusion, the tile
search, the cost model, every backend and explain treat the partial kernel
and the merge kernel like any other:

    sum[x] e          -> sum[p_x](sum[s_x](where(valid, e, 0)))
    max / min         -> the same with -inf / +inf outside
    logsumexp[x] e    -> logsumexp[p_x](logsumexp[s_x](where(valid, e, -inf)))
    mean[x] e         -> the split sum / size(x)
    var[x] e          -> the split sum of squared deviations from the split mean / size(x)
    A B over x        -> sum[p_x](where(valid, A, 0) where(valid, B, 0) over s_x)
    softmax[x](S) V   -> O_p = softmax[s_x](S') V' and L_p = logsumexp[s_x](S') per split,
                         then softmax[p_x](L_p) O_p over p_x   (S' = where(valid, S, -inf);
                         L_p is stored broadcast over O's value axes, so the partial kernel
                         stores arrays of one shape and keeps those axes woven)

The merge of the softmax-contraction pair is the online softmax's merge of
(m, l, o) states in the form the language already has: a split whose keys
are all masked has L_p = -inf and O_p = 0, so it weighs nothing, and a row
masked everywhere gives 0, as the reference does. Each statement holding a
reduction over x is cut in two: the partial side becomes a new statement
(`O.part`), the merge and what follows it stay in the original one, so the
merge is always its own kernel's work. Readers of x that are not reductions (an output
keeping x, the normalising pass of a norm) go on reading the original arrays;
a standalone softmax over x is first written as exp(S - logsumexp[x](S)) so its
statistics split. An axis that is scanned, moved by a view, normalised by a
softmax over several axes before its reduction, or reduced by a reduction that
reads another reduction over it (`sum[x](X - mean[x](X))`) is not split
(`splittable` says why).

`split(g, axis, parts)` is a pure function: it returns a new graph.
"""

from __future__ import annotations

from .graph import DiGraph
import numpy as np

from ..diagrams.diagnostics import NapkinError, error
from . import ir, merge
from .split_region import MERGEABLE, NotSplittable, Region, normalisations
from .split_rewrite import Rewrite, SplitInfo, infos, share, split_axes


def complete_sizes(g: DiGraph, sizes: dict) -> dict:
    """`sizes` with every axis of `g` the diagram itself does not size (a split's p_x and
    s_x, a merged axis `(h*d)`): the one place derived sizes are computed (run time and
    planning alike)."""
    out = dict(sizes)
    for name, info in g.graph["axes"].items():      # (static parts first: `(h*d)`, d = 16)
        if name not in out and info.derived is None and info.size is not None:
            out[name] = info.size
    out = merge.sizes_of(g, out)
    for name, info in g.graph["axes"].items():
        if name not in out and info.derived is not None:
            source, parts = info.derived
            out[name] = share(out[source], parts)
    return out


def splittable(g: DiGraph, axis: str, within: frozenset | None = None) -> str | None:
    """None when `axis` can be split (in the statements `within` alone: Region), else why
    not."""
    if any(axis == merged for _, merged, _ in g.graph.get("local_merged", ())):
        return ("its product reads it through reshapes of the operands (compiler/local_merge.py), "
                "not the windows of loads a split reads")
    try:
        Region(normalisations(g.copy(), axis, within), axis, within)
    except NotSplittable as exc:
        return str(exc)
    return None


def split(g: DiGraph, axis: str, parts: int, within: frozenset | None = None) -> DiGraph:
    """The graph with reduced axis `axis` split in `parts` (see the module docstring); with
    `within`, the reductions of those statements alone (one kernel's: Region)."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise NotSplittable(f"a split count is a whole number of at least 1, not {parts!r}")
    g = normalisations(g.copy(), axis, within)
    return Rewrite(g, Region(g, axis, within), int(parts), within).run()


def refuse(axis: str, why: str, span=None) -> NapkinError:
    return error("N0607", f"cannot split `{axis}`: {why}", span,
                 help="split an axis that a sum, max, min, mean, logsumexp, argmax, argmin, "
                      "variance or contraction reduces (a softmax over it: only when contracted over it); "
                      "or drop the hint and let the planner choose")


def window(g: DiGraph, n: int):
    """(base node, split) when n is a split's window gather (SplitInfo.windows), else None."""
    info = next((i for i in infos(g) if n in i.windows), None)
    if info is None:
        return None
    return ir.operands(g, n)[0], info


def unmasked(g: DiGraph, n: int) -> int:
    """The window, or the gather of a load over the split's axes (a paged cache's rows:
    compiler/rowsource.py), under a `where(valid, rows, 0)` mask (a lowering that zero-fills
    the rows past the axis needs no mask), else n."""
    op = ir.op(g, n)
    if isinstance(op, ir.Map) and op.fn == "where":
        cond, value, fill = ir.operands(g, n)
        from .kernels import is_free
        if is_free(g, cond) and isinstance(ir.op(g, fill), ir.Const) and \
                ir.op(g, fill).value == 0 and (window(g, value) is not None or
                                               _gathered_rows(g, value)):
            return value
    return n


def _gathered_rows(g: DiGraph, n: int) -> bool:
    """Whether n gathers an input's rows at positions of the split's share axis."""
    return bool(infos(g)) and isinstance(ir.op(g, n), ir.Gather) and \
        isinstance(ir.op(g, ir.operands(g, n)[0]), ir.Input) and \
        any(info.share_axis in ir.type_of(g, n).axes for info in infos(g))


__all__ = ["split", "splittable", "infos", "window", "unmasked", "complete_sizes", "share", "split_axes",
           "SplitInfo", "NotSplittable", "refuse", "MERGEABLE"]
