"""benchmarks/gpu_check.py's pipeline section: the same tensor-core kernels pipelined 2, 3 and
4 stages deep, timed on a GPU, beside the depth the cost model chose (occupancy.stages) and
its prediction; without a GPU (--dry-run) each variant is planned and lowered only.

What it calibrates: the model gives a kernel the fewest stages whose chunks in flight cover
the memory latency (Little's law, occupancy.LATENCY_SECONDS and L2_LATENCY_SECONDS,
assumptions). If the measured time keeps falling past the chosen depth, the latency is
larger than assumed; if it is flat from 2 stages on, smaller. Cases: matmul 4096^3 at
k-steps 16 and 32 (12 and 24 KB a chunk), the d = 64 attention backward (its slowest
kernel: a chain) and rmsnorm_linear 4096^3 (an operand computed as it is staged)."""

from __future__ import annotations

import traceback

CASES = [
    # (label, diagram, shape, hints)
    ("matmul k-step 16", "matmul", {"m": 4096, "n": 4096, "k": 4096}, {"stream": {"k": 16}}),
    ("matmul k-step 32", "matmul", {"m": 4096, "n": 4096, "k": 4096}, {"stream": {"k": 32}}),
    ("rmsnorm_linear", "rmsnorm_linear", {"t": 4096, "i": 4096, "o": 4096}, {}),
    ("attention backward (its slowest kernel)", "grad:attention", {"b": 4, "h": 16, "q": 4096, "x": 4096}, {}),
]
DEPTHS = (2, 3, 4)


def stages(dry_run: bool, quick: bool):
    """Per case: the chosen depth, the prediction, and (on a GPU) each depth's time."""
    import napkin
    from napkin.bench import variant
    from napkin.compiler.plan import plan
    from napkin.compiler.variants import with_stages
    from napkin.pipeline import lowered
    for label, name, shape, hints in CASES[:1 if quick else None]:
        entry = {"case": label, "shape": shape}
        try:
            d = napkin.grad(variant(name[5:], "f16", d=64)) if name.startswith("grad:") \
                else variant(name, "f16")
            p = plan(d, "h200", shape, hints)
            k = max(range(len(p.kernels)), key=lambda i: p.kernels[i].cost.time) \
                if name.startswith("grad:") else 0
            kp = p.kernels[k]
            entry.update(kernel=kp.kernel.name, chosen=kp.schedule.stages,
                         chunk=kp.choice.stream[1] if kp.choice.stream else None,
                         predicted_seconds=kp.cost.time)
            variants = {s: with_stages(p, s) for s in DEPTHS}
            if dry_run:
                for v in variants.values():
                    lowered(v)          # every depth lowers (the CUDA a GPU run would time)
                entry["status"] = "planned"
            else:
                entry.update(_times(d, shape, variants, k))
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _times(d, shape, variants: dict, k: int) -> dict:
    """Each depth's time for the whole plan (the other kernels are the same in every one)."""
    import torch
    from napkin.bench import Timer, random_inputs
    from napkin.kernel import Kernel
    from napkin.pipeline import lowered
    inputs = random_inputs(torch, d, shape)
    timer = Timer(torch)
    out = {}
    for depth, p in variants.items():
        kernel = Kernel(d, backend="cuda")
        made = (p, *lowered(p))
        kernel.compiled_for = lambda sizes=None, made=made: made   # time exactly this plan
        out[str(depth)] = timer(lambda: kernel(**inputs))
    return {"status": "ok", "measured_seconds": out}


def _print_stages(e) -> None:
    head = f"pipeline {e.get('case')}"
    if e.get("status") == "error":
        print(f"{head}: ERROR {e['error']}")
        return
    line = (f"{head}: chunk {e['chunk']}, the model chose {e['chosen']} stages, predicted "
            f"{e['predicted_seconds'] * 1e6:.1f} us")
    if e.get("measured_seconds"):
        line += "; measured " + ", ".join(f"{s} stages {t * 1e6:.1f} us"
                                          for s, t in e["measured_seconds"].items())
    print(line)
