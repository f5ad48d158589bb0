"""Why each kernel of fusion's layout ends where it does (FusedKernel.reason, made when explain
reads it): the arrays that go through global memory and what fusing them would cost (a cycle,
a split the lowering keeps apart, the model's time fused and apart, confirmed by the full
tile search where confirm.py refused the merge), what a kernel recomputes rather than loads,
and why attention's statements are not one FlashAttention kernel."""

from __future__ import annotations

from . import ir
from .clusters import _creates_cycle, _edges, _splits_apart, apart_reason, cluster_dag
from .kernels import FusedKernel
from .model import array_name
from .recompute import Layout, _Layouts, _merged


def why(lay: _Layouts, layout: Layout, i: int, refused: dict) -> str:
    """Why kernel `i` of the layout ends where it does (FusedKernel.reason)."""
    return "; ".join(r for r in (_reasons(lay, layout, i, refused), _not_flash(lay, layout, i),
                                 _recomputes(lay, layout, i)) if r)


def _join(names: list[str]) -> str:
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _reasons(lay: _Layouts, layout: Layout, i: int, refused: dict) -> str:
    """Why kernel `i` of the layout does not also take in its neighbours (`refused`: the
    full-search times of merges fusion undid, confirm.py)."""
    g, stmts, planner = lay.g, lay.stmts, lay.planner
    clusters = [c for c, _ in layout]
    owned = {c: c - copies for c, copies in layout} if any(cp for _, cp in layout) else None
    ks = lay.kernels(layout)
    index = {cl: j for j, cl in enumerate(clusters)}
    c = clusters[i]
    parts = []
    dag = cluster_dag(g, stmts, clusters, owned)
    for p, q in _edges(g, stmts, clusters, owned=owned):
        if q != c:
            continue
        j = index[p]
        stored = sorted({array_name(g, n) for n in ks[j].stores})
        verb = "go" if len(stored) > 1 else "goes"
        merged = _merged(layout, j, i)
        t_sep, t_fused = lay.time(layout, j) + lay.time(layout, i), lay.time(merged, 0)
        if _creates_cycle(g, stmts, clusters, p, c, owned, dag):
            why = "another kernel lies between them"
        elif _splits_apart(g, p | c):
            why = apart_reason(g, p | c)
        elif t_fused == float("inf"):
            why = "no tiling of the fused kernel fits in memory"
        elif frozenset((p, c)) in refused:
            fmt = _fmt if planner.target.processors else _units
            t_fused, t_sep = refused[frozenset((p, c))]
            why = f"fused it would take {fmt(t_fused)} instead of {fmt(t_sep)} (full tile search)"
        else:
            fmt = _fmt if planner.target.processors else _units
            why = f"fused it would take {fmt(t_fused)} instead of {fmt(t_sep)}" + \
                _factor(planner, lay.kernels(merged)[0], ks[j], ks[i])
        parts.append(f"{_join(stored)} {verb} through global memory: {why}")
    return "; ".join(parts)


def _recomputes(lay: _Layouts, layout: Layout, i: int) -> str:
    """What kernel `i` recomputes rather than loads, and what that saves."""
    c, copies = layout[i]
    if not copies:
        return ""
    g = lay.g
    eqs = {e.stmt: e.name for e in g.graph["equations"]}
    names = [eqs.get(s, f"#{s}") for s in sorted(copies)]
    before = lay.without_copies(layout, i)
    now_loads = set(lay.kernels(layout)[i].loads)
    before_loads = lay.kernels(before)[i].loads
    instead = list(dict.fromkeys(array_name(g, n) for n in before_loads if n not in now_loads))
    sources = list(dict.fromkeys(array_name(g, n) for n in lay.kernels(layout)[i].loads
                                 if n not in before_loads))
    fmt = _fmt if lay.planner.target.processors else _units
    what = f"recomputes {_join(names)}" + (f" from {_join(sources)}" if sources else "")
    if not lay.valid(before):       # loading them would wait on a kernel that waits on this one
        return what + " (loading them would make a cycle of kernels)"
    t_now, t_before = lay.time(layout), lay.time(before)
    return (f"{what} rather than loading {_join(instead)} (all kernels {fmt(t_now)} instead "
            f"of {fmt(t_before)})")


def _factor(planner, merged: FusedKernel, pk: FusedKernel, ck: FusedKernel) -> str:
    merged, a, b = planner.estimate(merged), planner.estimate(pk), planner.estimate(ck)
    if merged is None or a is None or b is None:
        return ""
    flops = sum(merged.cost.flops.values())
    separate = sum(a.cost.flops.values()) + sum(b.cost.flops.values())
    if flops > 1.01 * separate:
        return f" (it recomputes work: {flops / separate:.1f}x the arithmetic)"
    if merged.model.streaming.passes > 1:
        return f" (it needs {merged.model.streaming.passes} passes over {merged.model.streaming.axis})"
    if merged.cost.utilization < 0.5 * min(a.cost.utilization, b.cost.utilization):
        return f" (too few blocks to fill the GPU: {merged.cost.utilization:.0%} busy)"
    return ""


def _not_flash(lay: _Layouts, layout: Layout, i: int) -> str:
    """Why kernel i (a softmax) fused with the kernel before it and the one after it would
    not be FlashAttention (its head size dynamic, ...), where those three are an attention
    (an online softmax paired with its contraction); "" otherwise."""
    from .model import kernel_model
    from .tensorcore import best_site
    g, stmts, planner = lay.g, lay.stmts, lay.planner
    clusters = [c for c, _ in layout]
    if not any(isinstance(ir.op(g, n), ir.Softmax) for n in lay.kernels(layout)[i].nodes):
        return ""
    edges = list(_edges(g, stmts, clusters))
    before = [clusters.index(p) for p, q in edges if q == clusters[i]]
    after = [clusters.index(q) for p, q in edges if p == clusters[i]]
    if len(before) != 1 or len(after) != 1 or before[0] == after[0] or \
            any(copies for _, copies in layout):
        return ""
    first = _merged(layout, before[0], i)
    rest = [k for k in range(len(layout)) if k not in (before[0], i)]
    three = _merged(first, 0, 1 + rest.index(after[0]))
    k = lay.kernels(three)[0]
    paired = [a for a in k.reduced(g) if kernel_model(g, k, a).streaming.pairs]
    if not paired:
        return ""
    # a hint streaming another axis than the keys keeps the kernel off FlashAttention
    # whatever the head (`--stream d=16`): say that, not what the head lacks
    hint = next((h for h in planner.hints if h.kind == "stream" and h.level == 1 and
                 h.axis in k.reduced(g) and h.axis not in paired), None)
    if hint is not None:
        named = f"--stream {hint.axis}={hint.size}" if hint.info is None else hint.describe()
        return (f"not FlashAttention with the kernels around it: the hint `{named}` streams "
                f"`{hint.axis}`, FlashAttention streams `{paired[0]}` (drop the hint)")
    why = best_site(g, k, planner.target, planner.sizes)
    return f"not FlashAttention with the kernels around it: {why}" if isinstance(why, str) \
        else ""


def _units(t: float) -> str:
    """A model without a clock (the paper's two-level target) predicts in its own units."""
    return f"{t:.3g} model time units"


def _fmt(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"
