"""benchmarks/gpu_check.py's merge section: a split's merge launched as a kernel against the
same merge run by the partial kernel's last block of each output tile (compiler/last_block.py),
timed on a GPU beside the model's prediction of each; without a GPU (--dry-run) both are
planned and lowered only.

What it calibrates: the model prices the tail as the merge kernels' time without their
launches plus one fence and counter round trip (last_block.FENCE_SECONDS, an assumption) and
takes it where that is faster. The cases are the two the planner merges in the last blocks
on its own (layernorm over rows of 500,000, cross-entropy over a million classes), on the
device's own target."""

from __future__ import annotations

import traceback

CASES = [
    # (diagram, shape: timed, and checked against the float64 reference)
    ("layernorm", {"r": 2, "c": 500000}),
    ("cross_entropy", {"t": 1, "v": 1000000}),
]
MERGES = ("kernel", "last-block")


def merges(dry_run: bool, quick: bool):
    """Per case: each merge's plan (split, launches, prediction) and, on a GPU, its time and
    whether its outputs meet the tolerance rule."""
    from napkin.bench import variant
    from napkin.compiler.plan import plan
    from napkin.pipeline import lowered
    for name, shape in CASES[:1 if quick else None]:
        entry = {"case": name, "shape": shape, "merges": {}}
        try:
            d = variant(name, "f16")
            for merge in MERGES:
                p = plan(d, "h200", shape, merge=merge)
                program, _ = lowered(p)
                entry["merges"][merge] = {
                    "predicted_seconds": p.time, "launches": len(program.kernels),
                    "split": None if p.split is None else [p.split.axis, p.split.parts]}
            entry["status"] = "planned"
            if not dry_run:
                entry.update(_times(d, shape))
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _times(d, shape: dict) -> dict:
    import torch
    from napkin.bench import Timer, check, random_inputs
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    inputs = random_inputs(torch, d, shape)
    timer = Timer(torch)
    out, correct = {}, {}
    for merge in MERGES:
        kernel = Kernel(d, Options.make(target="h200", arch="sm_90", merge=merge), backend="cuda")
        correct[merge] = check(kernel, torch, d, shape)
        out[merge] = timer(lambda: kernel(**inputs))
    return {"status": "ok", "measured_seconds": out, "correct": correct}


def _print_merges(e) -> None:
    head = f"merge {e.get('case')} {e.get('shape')}"
    if e.get("status") == "error":
        print(f"{head}: ERROR {e['error']}")
        return
    parts = []
    for merge, m in e["merges"].items():
        text = (f"{merge}: {m['launches']} launch(es), predicted "
                f"{m['predicted_seconds'] * 1e6:.1f} us")
        if e.get("measured_seconds"):
            text += f", measured {e['measured_seconds'][merge] * 1e6:.1f} us"
        parts.append(text)
    print(f"{head}: " + "; ".join(parts))
