"""benchmarks/gpu_check.py's backward section: attention's gradient (napkin.grad) planned
with and without atomics across blocks (compiler/chain.Across: dQ added by the chain over
blocks of keys, FlashAttention-2's backward kernel; `across=False`: dQ in a chain of its
own), each checked against the float64 reference at odd sizes (twice: the scratch is back at
zero after a launch) and timed at b=4, h=16, q=x=4096 (f16) beside PyTorch's
scaled_dot_product_attention backward and the model's predictions; without a GPU
(--dry-run) it is planned and lowered only.

What it calibrates: the target's `[l2] atomics` rate (an assumption: the model takes the
atomics when it predicts them faster, docs/tensor-cores.md) and whether the model orders the
two plans as the GPU does (`model_faster` against `measured_faster`)."""

from __future__ import annotations

import math
import traceback

SHAPE = {"b": 4, "h": 16, "q": 4096, "x": 4096}
CHECK = {"b": 1, "h": 2, "q": 77, "x": 300}          # three blocks of 128 keys, the last short
# (head dimension, saved statistics); --quick: the first (the saved one plans in half the time)
CASES = [(64, True), (64, False), (128, False)]


def backward(dry_run: bool, quick: bool):
    """Per case: both plans (kernels, launches, predictions) and, on a GPU, their times,
    PyTorch's, and whether their outputs meet the tolerance rule."""
    import napkin
    from napkin.compiler.plan import plan
    from napkin.pipeline import lowered
    for d, saved in CASES[:1 if quick else None]:
        entry = {"case": f"attention d={d}" + (" saved" if saved else ""), "shape": SHAPE}
        try:
            grad = napkin.grad(napkin.load("attention", d=d), saved=saved)
            plans = {}
            for across in (True, False):
                p = plan(grad, "h100", SHAPE, across=across)
                program, _ = lowered(p)
                plans["atomics" if across else "apart"] = {
                    "kernels": len(p.kernels), "launches": len(program.kernels),
                    "added": any(kp.schedule.across for kp in p.kernels),
                    "predicted_seconds": p.time}
            entry.update(status="planned", plans=plans)
            if not dry_run:
                entry.update(_run(grad, d, saved))
                entry["orders"] = orders(entry)
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _inputs(torch, napkin, sizes: dict, d: int, saved: bool, seed: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, h, q, x = (sizes[a] for a in "bhqx")
    out = {"Q": torch.randn(b, h, q, d, generator=g, device="cuda").half(),
           "K": torch.randn(b, h, x, d, generator=g, device="cuda").half(),
           "V": torch.randn(b, h, x, d, generator=g, device="cuda").half(),
           "dO": torch.randn(b, h, q, d, generator=g, device="cuda").half()}
    if saved:       # the forward's statistics, from napkin's own statistics forward
        from napkin.kernel import Kernel
        from napkin.pipeline import Options
        fwd = Kernel(napkin.statistics(napkin.load("attention", d=d)), Options.make(),
                     backend="cuda")
        o, lse = fwd(Q=out["Q"], K=out["K"], V=out["V"])
        out.update(P_lse=lse, O_saved=o)
    return out


def _run(grad, d: int, saved: bool) -> dict:
    import numpy as np
    import torch
    import napkin
    from napkin.bench import Timer
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    from napkin.runtime import compare
    out = {"status": "ok"}
    timer = Timer(torch)
    big = _inputs(torch, napkin, SHAPE, d, saved, 3)
    small = _inputs(torch, napkin, CHECK, d, saved, 1)
    host = {k: v.float().cpu().numpy().astype(np.float16 if v.dtype == torch.float16
                                                else np.float32) for k, v in small.items()}
    for name, across in (("atomics", True), ("apart", False)):
        kernel = Kernel(grad, Options.make(shape=SHAPE, across=across), backend="cuda")
        got = kernel(**small)
        again = kernel(**small)
        names = ("dQ", "dK", "dV")
        values = {n: v.float().cpu().numpy() for n, v in zip(names, got)}
        verdicts = compare.against_reference(grad, host, values)
        same = all(bool(torch.equal(a, b)) for a, b in zip(got, again))
        ok = all(v.ok for v in verdicts.values()) and same
        out[name] = {"ok": ok, "repeatable": same,
                     "messages": {k: v.message for k, v in verdicts.items() if not v.ok},
                     "measured_seconds": timer(lambda: kernel(**big))}
        if not ok:
            out["status"] = "wrong"
    q, k, v = (big[n].detach().clone().requires_grad_(True) for n in ("Q", "K", "V"))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    out["torch_seconds"] = timer(lambda: torch.autograd.grad(o, (q, k, v), big["dO"],
                                                             retain_graph=True))
    return out


def _print_backward(e) -> None:
    head = f"backward {e.get('case')}"
    if e.get("status") == "error":
        print(f"{head}: ERROR {e['error']}")
        return
    parts = []
    for name in ("atomics", "apart"):
        pl = e["plans"][name]
        text = (f"{name}: {pl['launches']} launch(es), predicted "
                f"{pl['predicted_seconds'] * 1e3:.3f} ms")
        if name in e:
            text += f", measured {e[name]['measured_seconds'] * 1e3:.3f} ms"
        parts.append(text)
    if "torch_seconds" in e:
        parts.append(f"SDPA backward {e['torch_seconds'] * 1e3:.3f} ms, {e['status']}")
    print(f"{head}: " + "; ".join(parts))


def orders(e) -> dict | None:
    """Whether the model and the GPU order the two plans alike (None before a GPU run)."""
    if "atomics" not in e or not math.isfinite(e["atomics"]["measured_seconds"]):
        return None
    model = e["plans"]["atomics"]["predicted_seconds"] < e["plans"]["apart"]["predicted_seconds"]
    measured = e["atomics"]["measured_seconds"] < e["apart"]["measured_seconds"]
    return {"model_faster": model, "measured_faster": measured, "agree": model == measured}
