"""benchmarks/gpu_check.py's scatter section: the gradient of a gather (embedding's dE) as a
scatter-add (compiler/scatter.py: atomicAdd into an f32 scratch, then a conversion kernel),
checked against the float64 reference with heavy duplicate and out-of-range indices, and
timed beside PyTorch's own embedding backward (aten.embedding_dense_backward) and the
model's prediction; without a GPU (--dry-run) it is planned and lowered only.

What it calibrates: the target's `[l2] atomics` rate (an assumption: half the L2 bandwidth
in 4-byte words, docs/cost-model.md) and the queueing of atomics at one address (a third of
the tokens on one row in the skewed case)."""

from __future__ import annotations

import traceback

# (name, shape timed, the share of tokens on row 0: a frequent token's queue of atomics)
CASES = [
    ("embedding", {"t": 4096, "v": 32000, "m": 1024}, 0.0),
    ("embedding", {"t": 4096, "v": 32000, "m": 1024}, 1 / 3),
]
CHECK = {"t": 1000, "v": 777, "m": 96}       # checked at this shape (indices past both ends)


def scatters(dry_run: bool, quick: bool):
    """Per case: the plan (engine, launches, prediction) and, on a GPU, its time, PyTorch's,
    and whether its output meets the tolerance rule."""
    import napkin
    from napkin.compiler.plan import plan
    from napkin.pipeline import lowered
    for name, shape, skew in CASES[:1 if quick else None]:
        entry = {"case": name, "shape": shape, "skew": skew}
        try:
            d = napkin.grad(name)
            p = plan(d, "h200", shape)
            program, _ = lowered(p)
            entry.update(status="planned", engine=[kp.schedule.engine for kp in p.kernels],
                         launches=len(program.kernels), predicted_seconds=p.time)
            if not dry_run:
                entry.update(_run(d, shape, skew))
        except Exception as exc:
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _tokens(torch, t: int, v: int, skew: float, outside: bool, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    lo, hi = (-3, v + 3) if outside else (0, v)
    tok = torch.randint(lo, hi, (t,), generator=g, device="cuda", dtype=torch.int32)
    tok[: int(skew * t)] = 0
    return tok


def _run(d, shape: dict, skew: float) -> dict:
    import numpy as np
    import torch
    from napkin.bench import Timer
    from napkin.compiler.plan import plan
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    from napkin.runtime import compare
    kernel = Kernel(d, Options.make(target="h200", arch="sm_90"), backend="cuda")
    # correctness: a small table, a third of the tokens on one row, indices past both ends
    g = torch.Generator(device="cuda").manual_seed(1)
    dx = torch.randn(CHECK["t"], CHECK["m"], generator=g, device="cuda").half()
    tok = _tokens(torch, CHECK["t"], CHECK["v"], 1 / 3, True, 2)
    e = torch.zeros(CHECK["v"], CHECK["m"], device="cuda", dtype=torch.float16)
    inputs = {"E": e, "tok": tok, "dX": dx}
    got = kernel(**inputs)
    again = kernel(**inputs)                 # the scratch is back at zero after a launch
    host = {k: v.cpu().numpy() for k, v in inputs.items()}
    small = plan(d, "h200", CHECK)
    verdict = compare.against_reference(d, host, {"dE": got.float().cpu().numpy()},
                                        plan=small)["dE"]
    same = bool(np.array_equal(got.cpu().numpy(), again.cpu().numpy()))
    # timing, in-range tokens (PyTorch's backward assumes them)
    t, v, m = shape["t"], shape["v"], shape["m"]
    dx = torch.randn(t, m, device="cuda").half()
    tok = _tokens(torch, t, v, skew, False, 3)
    e = torch.zeros(v, m, device="cuda", dtype=torch.float16)
    timer = Timer(torch)
    mine = timer(lambda: kernel(E=e, tok=tok, dX=dx))
    theirs = timer(lambda: torch.ops.aten.embedding_dense_backward(dx, tok.long(), v, -1, False))
    return {"status": "ok" if verdict.ok and same else "wrong", "message": verdict.message,
            "repeatable": same, "measured_seconds": mine, "torch_seconds": theirs}


def _print_scatter(e) -> None:
    head = f"scatter {e.get('case')} {e.get('shape')} skew {e.get('skew', 0):.2f}"
    if e.get("status") == "error":
        print(f"{head}: ERROR {e['error']}")
        return
    text = (f"{'/'.join(e['engine'])}, {e['launches']} launch(es), predicted "
            f"{e['predicted_seconds'] * 1e6:.1f} us")
    if "measured_seconds" in e:
        text += (f", measured {e['measured_seconds'] * 1e6:.1f} us (PyTorch's embedding "
                 f"backward {e['torch_seconds'] * 1e6:.1f} us), {e['status']}: {e['message']}")
    print(f"{head}: {text}")
