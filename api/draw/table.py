"""Under the planned picture: a legend, and the paper's table of M and H per column, in bytes.

The columns are the plan's (`compiler/columns.py`): a kernel loads, computes and stores.
Per column and per level below global memory the table gives M, the bytes resident in one
unit of the level at that column (a block's shared memory, a thread's registers), and H, the
bytes that cross into or out of the level there, over all units. Both come from the cost
model (`compiler/cost.py`): M is the cost of that column alone, H of each array the cost
with every other array weighing nothing. Each kernel's total row is the explain report's:
M is the largest column, H the sum; the last row is the report's global traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..compiler.cost import evaluate
from . import text
from .planned import axis_labels
from .scene import MARK, TEXT, Curve, Rect, Text

SIZE = 10.0     # table text
ROW = 16.0      # table row pitch


@dataclass(frozen=True)
class Row:
    kind: str                 # kernel (its header) | column | total | all
    label: str
    kernel: str
    cells: dict = field(default_factory=dict)    # "M smem" / "H smem" -> bytes


def heads(plan) -> list[str]:
    return [f"{q} {lv.name}" for lv in plan.target.levels[1:] for q in ("M", "H")]


def column_costs(plan, kp) -> list[dict[str, float]]:
    """Per column of a kernel plan: M and H (bytes) at every level below global."""
    model, levels = kp.model, plan.target.levels
    traffic = {li: [0.0] * len(model.arrays) for li in range(1, len(levels))}
    for i, a in enumerate(model.arrays):
        if a.role not in ("load", "store"):
            continue
        only = replace(model, arrays=tuple(b if j == i else replace(b, bytes=0)
                                           for j, b in enumerate(model.arrays)))
        cost = evaluate(only, kp.columns, kp.choice, plan.sizes, plan.target)
        for li, lc in enumerate(cost.levels[1:], start=1):
            traffic[li][i] = float(lc.H)
    out = []
    for col in kp.columns:
        cost = evaluate(model, (col,), kp.choice, plan.sizes, plan.target)
        row = {}
        for li, lc in enumerate(cost.levels[1:], start=1):
            row[f"M {lc.name}"] = float(lc.M)
            row[f"H {lc.name}"] = sum(traffic[li][i] for i in col.loads + col.stores)
        out.append(row)
    return out


def kernel_line(kr: dict) -> str:
    """`k0: computes S, P, O; streams x; smem g_q=256 s_x=64 d=64; registers t_q=8 d/w_d=8`."""
    parts = [f"{kr['name']}: computes {', '.join(kr['equations'])}"]
    if kr.get("run_by"):       # a split's merge run by the partial kernel's last blocks
        parts.append(f"run by {kr['run_by']}'s last blocks")
    if kr["streaming"]:
        parts.append(f"streams {kr['streaming']['axis']}")
    for depth, lv in enumerate(kr["levels"], start=1):
        labels = axis_labels(kr, depth)
        if lv["axes"]:
            parts.append(f"{lv['level']} " + " ".join(labels[a] for a in lv["axes"]))
    parts.append(f"{_seconds(kr['predicted_seconds'])}, bound by {kr['bound']}")
    return "; ".join(parts)


def rows(plan, rep: dict) -> list[Row]:
    """The table: per kernel a header, its columns and its total (the report's numbers)."""
    out = []
    for kp, kr in zip(plan.kernels, rep["kernels"]):
        name = kr["name"]
        out.append(Row("kernel", kernel_line(kr), name))
        stream = kp.choice.stream[0] if kp.choice.stream else None
        for col, costs in zip(kp.columns, column_costs(plan, kp)):
            loop = f" (each {stream} chunk)" if col.in_loop and stream else ""
            out.append(Row("column", col.label + loop, name, costs))
        total = {}
        for lv in kr["levels"]:
            total[f"M {lv['level']}"] = lv["M_bytes"]
            total[f"H {lv['level']}"] = lv["H_bytes"]
        out.append(Row("total", f"total {name}", name, total))
    first = plan.target.levels[1].name
    out.append(Row("all", f"all kernels ({_seconds(rep['predicted_seconds'])})", "",
                   {f"H {first}": rep["H_bytes"]}))
    return out


def number(v) -> str:
    return "" if v is None else f"{round(v):,}"


def _seconds(s: float) -> str:
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"predicted {s / scale:.3g} {unit}"
    return f"predicted {s * 1e9:.3g} ns"


def legend_entries(plan) -> list[tuple[str, int | None, str]]:
    """(role, level, words) for the legend."""
    out = []
    for i, lv in enumerate(plan.target.levels):
        unit = f", per {lv.unit}" if i and lv.unit else ""
        out.append(("swatch", i, f"level {i}: {lv.name}{unit}"))
    out += [("load", 1, "load"), ("store", 0, "store"), ("kernel", None, "kernel")]
    return out


def add(scene, plan, rep: dict, margin: float) -> None:
    """Appends the legend, a note and the table under the picture; grows the scene."""
    x, y = margin, scene.height + 4
    for role, level, words in legend_entries(plan):
        if role == "swatch":
            scene.add(Curve("swatch", x, y - 4, x + 22, y - 4, level=level, layer=MARK))
            x += 28
        else:
            w = 12 if role == "kernel" else 4
            scene.add(Rect(role, x, y - 11, w, 14, level=level, layer=MARK))
            x += w + 6
        scene.add(Text("legend", x, y, words, size=SIZE, layer=TEXT))
        x += text.width(words, SIZE) + 18
    width = x
    sizes = " ".join(f"{a}={v}" for a, v in rep["sizes"].items())
    notes = [f"bytes. M: resident at once in one unit of the level; H: moved into and out of "
             f"it by all units. sizes: {sizes}"]
    y += ROW + 6
    for note in notes:
        scene.add(Text("table-note", margin, y, note, size=SIZE, layer=TEXT))
        width = max(width, margin + text.width(note, SIZE))
        y += ROW
    table = rows(plan, rep)
    cols = heads(plan)
    first = max(text.width(r.label, SIZE) for r in table if r.kind != "kernel") + 24
    widths = [max(text.width(h, SIZE), *(text.width(number(r.cells.get(h)), SIZE)
                                        for r in table)) + 24 for h in cols]
    y += 4
    right = margin + first
    for h, w in zip(cols, widths):
        right += w
        scene.add(Text("table-head", right, y, h, anchor="end", size=SIZE, layer=TEXT))
    scene.add(Text("table-head", margin, y, "column", size=SIZE, layer=TEXT))
    width = max(width, right)
    for k, r in enumerate(table):
        y += ROW
        key = f"{r.kind}:{r.kernel}" if r.kind != "column" else f"column:{r.kernel}:{k}"
        role = {"kernel": "table-kernel", "column": "table-cell"}.get(r.kind, "table-total")
        if r.kind == "kernel":
            y += 4
            scene.add(Text(role, margin, y, r.label, size=SIZE, layer=TEXT,
                           data=(("row", key),)))
            width = max(width, margin + text.width(r.label, SIZE))
            continue
        scene.add(Text(role, margin, y, r.label, size=SIZE, layer=TEXT,
                       data=(("row", key), ("col", "column"))))
        right = margin + first
        for h, w in zip(cols, widths):
            right += w
            if h in r.cells:
                scene.add(Text(role, right, y, number(r.cells[h]), anchor="end", size=SIZE,
                               layer=TEXT, data=(("row", key), ("col", h))))
    scene.width = max(scene.width, int(width + margin + 0.999))
    scene.height = int(y + margin + 0.999)
