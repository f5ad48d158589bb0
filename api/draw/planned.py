"""The planned picture: the diagram as its plan runs it, in the paper's convention.

Each kernel of the plan is a region of the picture: its boxes are drawn together, in the
plan's kernel order, and a stretch of global memory separates two kernels. Inside a
kernel's region an array is coloured by the memory level the plan keeps it at, read from
the explain report's buffers: an input of the kernel at the level it is loaded into (the
shallowest level its buffers name), a value the kernel computes at the level it lives at
(the deepest). Everywhere else (before, between and after the kernels, and arrays a kernel
does not touch) arrays are in global memory. A bar marks a load where a kernel begins and a
store where it ends. The wires a box makes are labelled with the plan's relabelled axes at
the level the value lives at (`g_q`, `s_x`, `t_q`, `d/w_d`). The legend and the table of M
and H per column go under the picture (`table.py`).

Boxes the plan's canonical form removed (a softmax written out) are drawn in the kernel of
the first box that uses them; their arrays are not in the report, so they are coloured as
the kernel's values.
"""

from __future__ import annotations

from dataclasses import replace

from ..compiler import ir
from ..compiler.canonical import through
from ..compiler.model import array_name
from .model import Structure, structure
from .scene import FILL, MARK, TEXT, Curve, Rect, Text

ARRAY_ROLES = ("wire", "cap", "branch", "array-label", "axis-label")
BAND = 20.0   # the row of kernel names, between the caption and the arrays


class Placement:
    """Which kernel runs each box, and where each array lives inside each kernel."""

    def __init__(self, plan, rep: dict, diagram):
        self.plan, self.rep = plan, rep
        self.g = g = plan.graph
        self.levels = plan.target.level_names
        self.names = [kp.kernel.name for kp in plan.kernels]
        self.loads = [{through(g, n) for n in kp.kernel.loads} for kp in plan.kernels]
        self.stores = [{through(g, n) for n in kp.kernel.stores} for kp in plan.kernels]
        self.computes = [{through(g, n) for n in kp.kernel.nodes} for kp in plan.kernels]
        # a box is drawn in one kernel: the one that stores its array when kernels overlap
        # (another kernel recomputing it colours it at its own level: `where`), else the first
        self.owner: dict[int, int] = {}
        for i, kp in enumerate(plan.kernels):
            for n in kp.kernel.stores:
                self.owner.setdefault(n, i)
        for i, kp in enumerate(plan.kernels):
            for n in kp.kernel.nodes:
                self.owner.setdefault(n, i)
        # a box the plan rewrote (a split's partial side: compiler/split.py) belongs to the
        # kernel that runs its equation (the merge's, for the equation a split cuts in two)
        self.by_stmt: dict[int, int] = {}
        for i, kp in enumerate(plan.kernels):
            for s in kp.kernel.equations:
                self.by_stmt.setdefault(s, i)
        self.stmt_of = {n: d["stmt"] for n, d in diagram.ir.nodes(data=True)}
        base = structure(diagram)
        self.values = base.values
        self.kernel_of: dict[int, int | None] = {}     # box node -> kernel index
        self.made_in: dict[int, int | None] = {}       # value id -> kernel that makes it
        self.rank: dict[int, int] = {}                 # box node -> position of its kernel
        self._assign(base)

    # --- boxes to kernels -----------------------------------------------------------
    def _assign(self, s: Structure) -> None:
        boxes = [c.box for c in s.columns]
        users: dict[int, list[int]] = {}
        for i, bx in enumerate(boxes):
            for v in bx.operands:
                users.setdefault(v, []).append(i)
        out_kernel = {o.value: self._output_kernel(o.name) for o in s.outputs}
        kern: list[int | None] = [None] * len(boxes)
        for i in reversed(range(len(boxes))):
            bx = boxes[i]
            k = self.owner.get(bx.node) if bx.node in self.g else None
            if k is None and self.plan.split is not None:
                k = self.by_stmt.get(self.stmt_of.get(bx.node))
            if k is None:   # removed by canonicalisation: with the first box that uses it
                cands = [kern[j] for j in users.get(bx.result, ()) if kern[j] is not None]
                if out_kernel.get(bx.result) is not None:
                    cands.append(out_kernel[bx.result])
                k = min(cands) if cands else None
            kern[i] = k
        producer = {bx.result: i for i, bx in enumerate(boxes)}
        ranks: list[int] = []
        dropped = len(self.names)
        for i, bx in enumerate(boxes):
            r = dropped if kern[i] is None else kern[i]
            r = max([r] + [ranks[producer[v]] for v in bx.operands if v in producer])
            ranks.append(r)
            self.rank[bx.node] = r
            self.kernel_of[bx.node] = r if r < dropped else None
            self.made_in[bx.result] = self.kernel_of[bx.node]

    def _output_kernel(self, name: str) -> int | None:
        n = self.g.graph["outputs"].get(name)
        if n is None:
            return None
        t = through(self.g, ir.operands(self.g, n)[0])
        return next((i for i, st in enumerate(self.stores) if t in st), None)

    # --- arrays to levels -----------------------------------------------------------
    def plan_node(self, v: int) -> int | None:
        """The node of the plan's graph a drawn array is (None: canonicalised away)."""
        if v in self.g:
            return through(self.g, v)
        name = self.values[v].name
        arrays = self.g.graph.get("arrays", {})
        return through(self.g, arrays[name]) if name in arrays else None

    def display(self, v: int) -> str:
        return self.values[v].name or f"%{v}"

    def stored(self, v: int) -> str:
        """The name of a stored array: the diagram's, else the plan's (`C:gelu(contract[l])`,
        a statement compiler/nested.py made)."""
        t = self.plan_node(v)
        return self.values[v].name or (array_name(self.g, t) if t is not None else f"%{v}")

    def where(self, v: int, k: int | None) -> tuple[int | None, str]:
        """(level index, the report's name for it) of array `v` inside kernel `k` (None: outside
        every kernel). Level None: an array no output needs (the plan drops it)."""
        if self.made_in.get(v, -1) is None:
            return None, self.display(v)
        if k is None:
            return 0, self.display(v)
        t = self.plan_node(v)
        loaded = t is not None and (t in self.loads[k] or (       # an input, or a view of one
            isinstance(ir.op(self.g, t), (ir.View, ir.Gather))
            and _view_base(self.g, t) in self.loads[k]))
        if not loaded and self.made_in.get(v) != k and (t is None or t not in self.computes[k]):
            return 0, self.display(v)           # in global memory; this kernel does not touch it
        name = self._array(k, t, loaded, v) or self.display(v)
        found = self._buffers(k, name)
        if found:
            level, name = min(found) if loaded else max(found)
            return level, name
        return (1 if loaded else len(self.levels) - 1), name

    def _array(self, k: int, t: int | None, loaded: bool, v: int | None = None) -> str | None:
        """The plan model's name for node `t` in kernel `k` (`S:contract[d]`, `O`, `K[d x]`);
        drawn array `v` itself first (a view of an input loaded beside the input: `doc[q]`)."""
        if t is None:
            return None
        g, arrays = self.g, self.plan.kernels[k].model.arrays
        for a in arrays:
            if a.role == "load" and a.node == v and isinstance(ir.op(g, v), (ir.View, ir.Gather)):
                return a.name
        for a in arrays:
            if a.role != "store" and through(g, a.node) == t:
                return a.name
        if loaded:   # an input seen only through views: the views are what is loaded
            for a in arrays:
                if a.role == "load" and _view_base(g, a.node) == t:
                    return a.name
        return None

    def _buffers(self, k: int, name: str) -> list[tuple[int, str]]:
        """(level index, buffer name) of the report's buffers holding `name` in kernel `k`
        (a buffer shared by several arrays is named `K/V`)."""
        out = []
        for b in self.rep["kernels"][k]["buffers"]:
            if b["name"] == name or name in b["name"].split("/"):
                out.append((self.levels.index(b["level"]), b["name"]))
        return out

    # --- labels ---------------------------------------------------------------------
    def relabel_values(self) -> dict[int, dict[str, str]]:
        """Per array a box makes inside a kernel: its wires relabelled at its level."""
        out = {}
        for v, k in self.made_in.items():
            if k is None:
                continue
            level, _ = self.where(v, k)
            labels = axis_labels(self.rep["kernels"][k], level)
            out[v] = {a: labels[a] for a in self.values[v].axes if a in labels}
        return out


def _view_base(g, n: int) -> int:
    """The array a view (or a gather) reads."""
    while isinstance(ir.op(g, n), (ir.View, ir.Gather)):
        n = ir.operands(g, n)[0]
    return through(g, n)


def axis_labels(kernel: dict, level: int) -> dict[str, str]:
    """Axis -> label at `level` (1: the first level below global) from the report's relabelled
    axes: `g_q=256`, `s_x=64`, `d=64` (whole) at level 1; deeper levels refine them:
    `t_q=8`, `d/w_d=8` (d split over 8 threads), `u_x=4`."""
    out: dict[str, str] = {}
    extent: dict[str, int] = {}
    for depth, lv in enumerate(kernel["levels"][:max(level, 1)], start=1):
        for a, e in lv["axes"].items():
            if depth == 1:
                extent[a] = e["size"]
            if e["kind"] == "whole":
                out[a] = f"{a}={e['size']}"
            elif e.get("merge"):
                per = extent.get(a)
                each = f"={per // e['size']}" if per and e["size"] and per % e["size"] == 0 else ""
                out[a] = f"{a}/{e['symbol']}{each}"
            else:
                out[a] = f"{e['symbol']}={e['size']}"
    return out


def order_key(placement: Placement):
    return lambda box: placement.rank[box.node]


def gaps(s: Structure, placement: Placement) -> list[int]:
    """Columns that start a new kernel (preceded by a stretch of global memory)."""
    ranks = [placement.rank[c.box.node] for c in s.columns]
    return [i for i in range(1, len(ranks)) if ranks[i] != ranks[i - 1]]


def _mid(shape) -> float:
    if isinstance(shape, Curve):
        return (shape.x1 + shape.x2) / 2
    return shape.x


def decorate(scene, s: Structure, placement: Placement, lay, band_top: float) -> None:
    """Colours the arrays of a laid-out scene by level; adds kernel regions, loads, stores."""
    regions: list[list] = []     # [kernel, x0, x1, first frame, last frame]
    for c, f in zip(s.columns, scene.frames):
        k = placement.kernel_of[c.box.node]
        if regions and regions[-1][0] == k:
            regions[-1][2], regions[-1][4] = f.x1, f
        else:
            regions.append([k, f.x0, f.x1, f, f])
    regions = [r for r in regions if r[0] is not None]
    levels = placement.levels

    def kernel_at(x: float) -> int | None:
        return next((k for k, x0, x1, _, _ in regions if x0 <= x <= x1), None)

    def tags(k: int | None, name: str, level: int | None):
        where = levels[level] if level is not None else "none"
        kname = placement.names[k] if k is not None else ""
        return (("array", name), ("kernel", kname), ("level", where))

    shapes = []
    for sh in scene.shapes:
        if sh.value is not None and sh.role in ARRAY_ROLES:
            k = kernel_at(_mid(sh))
            level, name = placement.where(sh.value, k)
            sh = replace(sh, level=level, data=tags(k, name, level))
        shapes.append(sh)
    bottom = scene.height - lay.m.margin + 6
    fills = []
    for k, x0, x1, first, last in regions:
        kr = placement.rep["kernels"][k]
        what = f"kernel {kr['name']}: computes {', '.join(kr['equations'])}"
        if kr["streaming"]:
            what += f"; streams {kr['streaming']['axis']}"
        fills.append(Rect("kernel", x0, band_top, x1 - x0, bottom - band_top, title=what,
                          layer=FILL, data=(("kernel", kr["name"]),)))
        label = kr["name"]
        if kr.get("recomputes"):          # computed again here rather than loaded (fuse.py)
            label += " recomputes " + ", ".join(kr["recomputes"])
            what += "; recomputes " + ", ".join(kr["recomputes"])
        shapes.append(Text("kernel-label", x0 + 5, band_top + 14, label, size=11.0,
                           layer=TEXT))
        # a load where the kernel begins; a store just after it ends, on global memory
        for role, x, side, moved in (("load", x0 + 1, first.before, placement.loads[k]),
                                     ("store", x1 + 1, last.after, placement.stores[k])):
            for v, top in side:
                if placement.plan_node(v) not in moved:
                    continue
                level, name = placement.where(v, k) if role == "load" else (0, placement.stored(v))
                ys = list(lay.wires(v, top).values())
                into = levels[level] if level is not None else "?"
                shapes.append(Rect(role, x, ys[0] - 7, 4, ys[-1] - ys[0] + 14, value=v,
                                   level=level, layer=MARK,
                                   title=f"{kr['name']} {role}s {name} "
                                         f"{'into' if role == 'load' else 'to'} {into}",
                                   data=tags(k, name, level)))
    scene.shapes = fills + shapes
