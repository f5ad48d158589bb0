"""`napkin explain --plot roofline.png`: each kernel's predicted point on the target's roofline.

A kernel's point is its arithmetic intensity (FLOPs over the bytes it moves to and from
global memory, from the explain report) against its predicted FLOP/s (FLOPs over predicted
seconds). The roofs are the target's compute peaks (one line per rate: FP32 CUDA cores,
tensor cores) and its global bandwidth (bytes/s into the first level below global). A
target whose compute is free (the paper's two-level model) has no compute roof.

`--bench FILE.json` adds measured points from `napkin bench --json`: a JSON list of records

    {"kernel": "attention", "seconds": 0.0041, "flops": 2.8e11, "bytes": 1.1e9}

(`source` and other keys may be present and are ignored but for the label; records whose
seconds, flops or bytes are not positive finite numbers, such as a failed baseline's NaN,
are skipped). matplotlib is optional (`pip install 'napkin[plot]'`); the picture is drawn
with the Agg backend, without touching matplotlib's global backend. The command writes the
bytes `png` returns (atomically).
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from ..diagrams.diagnostics import error
from .extra import need

WIDTH, HEIGHT, DPI = 8.0, 5.0, 100      # inches, dots per inch: an 800 x 500 PNG
FREE = 1e30                             # a compute rate this high is no roof (two-level)


def _matplotlib():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    return Figure, FigureCanvasAgg


def require():
    """matplotlib's Figure and Agg canvas; BackendUnavailable (N0901) when it is missing."""
    return need(_matplotlib, "matplotlib", "--plot")


def read_bench(path: str) -> list[dict]:
    """The measured records of a `napkin bench --json` file (see the module docstring)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise error("N0806", f"cannot read the --bench file {path}: {exc}",
                    help="write it with napkin bench --json FILE") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise error("N0806", f"the --bench file {path} is not a JSON list of records",
                    help='each record: {"kernel": NAME, "seconds": S, "flops": F, "bytes": B}')
    out = []
    for i, r in enumerate(data):
        missing = [k for k in ("kernel", "seconds", "flops", "bytes") if k not in r]
        if missing:
            raise error("N0806", f"record {i} of the --bench file {path} lacks "
                        + ", ".join(missing),
                        help='each record: {"kernel": NAME, "seconds": S, "flops": F, "bytes": B}')
        try:
            seconds, flops, moved = float(r["seconds"]), float(r["flops"]), float(r["bytes"])
        except (TypeError, ValueError):
            raise error("N0806", f"record {i} of the --bench file {path}: seconds, flops and "
                        "bytes must be numbers") from None
        if all(math.isfinite(v) and v > 0 for v in (seconds, flops, moved)):
            label = str(r["kernel"]) + (f" ({r['source']})" if r.get("source") else "")
            out.append({"label": label, "intensity": flops / moved, "flops_per_second":
                        flops / seconds})
    return out


def predicted(rep: dict) -> list[dict]:
    """Each kernel's predicted point (kernels that move no global bytes or do no work have none)."""
    out = []
    for k in rep["kernels"]:
        ai, seconds = k["arithmetic_intensity"], k["predicted_seconds"]
        if ai and k["flops"] > 0 and seconds > 0:
            out.append({"label": k["name"], "intensity": ai,
                        "flops_per_second": k["flops"] / seconds})
    return out


def roofs(target) -> tuple[list[tuple[str, float]], float | None]:
    """(compute peaks (names, FLOP/s), lowest first, rates that are equal named together;
    global bandwidth in bytes/s)."""
    names: dict[float, list[str]] = {}
    for name, rate in target.compute:
        if rate < FREE:
            names.setdefault(rate, []).append(name)
    bandwidth = target.levels[1].bandwidth if len(target.levels) > 1 else None
    return [("/".join(n), rate) for rate, n in sorted(names.items())], bandwidth


def _per_second(value: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}/s"
    return f"{value:.4g} {unit}/s"


def picture(rep: dict, target, bench: list[dict] | None = None, fmt: str = "png") -> bytes:
    """The roofline as PNG or SVG bytes (WIDTH x HEIGHT inches at DPI); `bench`: from
    read_bench."""
    Figure, Canvas = require()
    points, measured = predicted(rep), bench or []
    peaks, bandwidth = roofs(target)
    fig = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI)
    Canvas(fig)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [p["intensity"] for p in points + measured]
    if bandwidth:
        xs += [rate / bandwidth for _, rate in peaks]
    lo, hi = (min(xs) / 10, max(xs) * 10) if xs else (0.01, 1000.0)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    top = max((r for _, r in peaks), default=None)
    if bandwidth:
        ys = [x * bandwidth for x in grid]
        if top:
            ys = [min(y, top) for y in ys]
        ax.plot(grid, ys, color="#1b1b1b", lw=1.6,
                label=f"global bandwidth {_per_second(bandwidth, 'B')}")
    for name, rate in peaks:   # each compute roof from where the bandwidth roof meets it
        start = max(lo, rate / bandwidth) if bandwidth else lo
        ax.plot([start, hi], [rate, rate], ls="--", lw=1.0, color="#777777")
        ax.annotate(f"{name} {_per_second(rate, 'FLOP')}", (start, rate), fontsize=8,
                    xytext=(4, 3), textcoords="offset points", color="#444444")
    for group, marker, colour, name in ((points, "o", "#e07b00", "predicted"),
                                        (measured, "^", "#1f6fb4", "measured")):
        if not group:
            continue
        ax.scatter([p["intensity"] for p in group], [p["flops_per_second"] for p in group],
                   marker=marker, s=46, color=colour, zorder=3, label=name)
        for p in group:
            ax.annotate(p["label"], (p["intensity"], p["flops_per_second"]), fontsize=8,
                        xytext=(5, -11 if marker == "^" else 5), textcoords="offset points")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of global traffic)")
    ax.set_ylabel("FLOP/s")
    from . import display_name
    ax.set_title(f"{display_name(rep['diagram'])} on {rep['target']}: roofline", fontsize=11)
    ax.grid(True, which="major", lw=0.4, color="#dddddd")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=DPI, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()
