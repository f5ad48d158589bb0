"""benchmarks/gpu_check.py's ranking section: the model's fastest candidate tilings and the
chosen one, timed on a GPU, with each kernel's error (predicted over measured time, minus
1), the Kendall rank correlation between predicted and measured order, and the regret (the
chosen schedule's measured time over the best measured one); without a GPU (--dry-run) each
candidate is planned and lowered only. For attention d=64 and 128 at N = 4096 (b=4, h=16,
f16) and matmul 4096^3."""

from __future__ import annotations

import json
import sys
import traceback

RANKED = 8
RANKING_CASES = (("attention", {"d": 64}, {"b": 4, "h": 16, "q": 4096, "x": 4096}),
                 ("attention", {"d": 128}, {"b": 4, "h": 16, "q": 4096, "x": 4096}),
                 ("matmul", {}, {"m": 4096, "k": 4096, "n": 4096}))


def ranking(dry_run: bool):
    """Per case: the model's top candidates and the chosen plan, planned and lowered (dry
    run) or timed on the GPU, with error, Kendall tau and regret (see the docstring)."""
    for name, defines, shape in RANKING_CASES:
        entry = {"diagram": name, "shape": shape, **defines}
        try:
            entry.update(_rank(name, defines, shape, dry_run))
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _rank(name, defines, shape, dry_run) -> dict:
    from napkin.bench import variant
    from napkin.compiler import tiling_rank
    from napkin.compiler.plan import plan
    from napkin.compiler.variants import with_choices
    from napkin.pipeline import lowered
    d = variant(name, "f16", **defines)
    chosen = plan(d, "h200", shape)
    (kp,) = chosen.kernels
    if kp.schedule.site is None:
        return {"status": "error", "error": "the chosen plan is not on tensor cores"}
    candidates = tiling_rank.ranked(kp.model, kp.columns, chosen.target, chosen.sizes,
                                   kp.schedule.site, RANKED)
    plans = [with_choices(chosen, [c]) for c, _ in candidates]
    if not any(p.kernels[0].choice == kp.choice for p in plans):
        plans.append(chosen)
    rows = [{"choice": repr(p.kernels[0].choice), "predicted_seconds": p.time,
             "chosen": p.kernels[0].choice == kp.choice} for p in plans]
    if dry_run:
        for p in plans:
            lowered(p)           # every candidate lowers (the CUDA a GPU run would time)
        return {"status": "planned", "candidates": rows}
    import torch

    from napkin.bench import Timer, random_inputs
    from napkin.kernel import Kernel
    inputs = random_inputs(torch, d, shape)
    timer = Timer(torch)
    for row, p in zip(rows, plans):
        k = Kernel(d, backend="cuda")
        made = (p, *lowered(p))
        k.compiled_for = lambda sizes=None, made=made: made    # time exactly this plan
        row["measured_seconds"] = timer(lambda: k(**inputs))
        row["error"] = row["predicted_seconds"] / row["measured_seconds"] - 1
    measured = [r["measured_seconds"] for r in rows]
    chosen_time = next(r["measured_seconds"] for r in rows if r["chosen"])
    return {"status": "ok", "candidates": rows,
            "kendall_tau": kendall_tau([r["predicted_seconds"] for r in rows], measured),
            "regret": chosen_time / min(measured)}


def kendall_tau(xs, ys) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs (ties count neither)."""
    n = len(xs)
    if n < 2:
        return 1.0
    score = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = xs[i] - xs[j], ys[i] - ys[j]
            score += int(a * b > 0) - int(a * b < 0)
    return score / (n * (n - 1) / 2)


def _print_ranking(e) -> None:
    head = f"rank  {e['diagram']:<10} {json.dumps(e['shape'])} {e.get('d', '')}"
    if e.get("status") == "error":
        print(f"{head}  error: {e.get('error', '')[:160]}")
        return
    for r in e["candidates"]:
        got = (f"  measured {r['measured_seconds'] * 1e3:8.3f} ms  error {r['error']:+.0%}"
               if "measured_seconds" in r else "")
        mark = "*" if r["chosen"] else " "
        print(f"{head} {mark} predicted {r['predicted_seconds'] * 1e3:8.3f} ms{got}  {r['choice']}")
    if e.get("status") == "ok":
        print(f"{head}  Kendall tau {e['kendall_tau']:+.2f}, regret {e['regret']:.2f}x")
    sys.stdout.flush()
