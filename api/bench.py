"""Benchmarking compiled diagrams on a GPU: correctness first, then CUDA-event timings.

`bench(diagram, shape, ...)` checks the kernel against the reference at a
reduced shape (every output element written: outputs are pre-filled with
NaN), then times the full shape: warm-up, an L2 flush before every run, the
median of the runs. Each kernel of the plan is timed on its own (events around
each launch) and as a whole, beside the plan's predicted time, TFLOP/s and
GB/s, and beside baselines: PyTorch's SDPA (flash and cuDNN backends) for
attention, cuBLAS for matrix products.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


ATTENTION = {"attention": False, "attention_manual": False, "causal_attention": True}
MATMUL = ("matmul", "batched_matmul")
CHECK_LIMIT = 192      # largest size of a dynamic axis in the correctness check


@dataclass
class Record:
    kernel: str
    source: str              # napkin | sdpa-flash | sdpa-cudnn | cublas
    seconds: float
    flops: float
    bytes: float
    predicted_seconds: float | None = None
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = {"kernel": self.kernel, "source": self.source, "seconds": self.seconds,
               "flops": self.flops, "bytes": self.bytes, "predicted_seconds": self.predicted_seconds,
               "tflops": self.flops / self.seconds / 1e12 if self.seconds else None,
               "gbps": self.bytes / self.seconds / 1e9 if self.seconds else None}
        out.update(self.extra)
        return out


class Timer:
    """CUDA events through PyTorch (every array here is a torch tensor on the GPU)."""

    def __init__(self, torch, warmup: int = 3, reps: int = 15, flush_mb: int = 256):
        self.torch = torch
        self.warmup, self.reps = warmup, reps
        self.flush = torch.empty(flush_mb * (1 << 20) // 4, dtype=torch.float32, device="cuda")

    def __call__(self, fn) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.reps):
            self.flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)


def variant(name_or_diagram, dtype: str | None, **sizes):
    """The diagram with every f32/f16/bf16 storage dtype replaced by `dtype`."""
    import re

    import napkin
    from napkin.diagrams import sources
    from napkin.diagrams.diagnostics import Source
    src = sources.resolve(name_or_diagram)
    text = src.text if dtype is None else re.sub(r":\s*(f32|f16|bf16)\b", f": {dtype}", src.text)
    return napkin.load(Source(src.name, text), **sizes)


def random_inputs(torch, diagram, shape: dict, seed: int = 0) -> dict:
    """`napkin run`'s random inputs (commands.run.random_inputs: integers in the ranges the
    diagram reads them in), on the GPU in their storage dtypes."""
    from .commands.run import random_inputs as drawn
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
           "i32": torch.int32, "i64": torch.int64, "bool": torch.bool}
    dtypes = {s.name: s.dtype for s in diagram.inputs}
    out = {}
    for name, a in drawn(diagram, shape, seed).items():
        host = torch.from_numpy(a.astype("float32") if dtypes[name] == "bf16" else a)
        out[name] = host.to(device="cuda", dtype=tdt[dtypes[name]])
    return out


def check(kernel, torch, diagram, shape: dict) -> dict:
    """Run at a reduced shape, outputs pre-filled with NaN; compare with the reference."""
    from napkin.runtime import compare
    small = {a: min(v, CHECK_LIMIT) for a, v in shape.items()}
    inputs = random_inputs(torch, diagram, small, seed=1)
    tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    outs = []
    for s in diagram.outputs:
        dims = [diagram.axes[a] or small[a] for a in s.axes]
        outs.append(torch.full(dims, float("nan"), device="cuda", dtype=tdt[s.dtype]))
    got = kernel(**inputs, out=tuple(outs) if len(outs) > 1 else outs[0])
    got = got if isinstance(got, tuple) else (got,)
    host = {n: t.float().cpu().numpy() for n, t in inputs.items()}
    verdicts = compare.against_reference(   # held to the order its plan sums in
        diagram, host, {s.name: o.float().cpu().numpy() for s, o in zip(diagram.outputs, got)},
        plan=kernel.plan)
    return {n: {"ok": bool(v.ok), "error": v.error, "budget": v.budget, "message": v.message}
            for n, v in verdicts.items()}


def bench(diagram, shape: dict, name: str = "", baseline: str = "auto", warmup: int = 3,
          reps: int = 15, options=None) -> dict:
    """Correctness, then timings of napkin's kernels and of the baselines (needs a GPU);
    `options`: the driver's Options (target, engine, hints), the GPU's target by default."""
    import torch

    from napkin.kernel import Kernel
    kernel = Kernel(diagram, options, backend="cuda")
    verdicts = check(kernel, torch, diagram, shape)
    inputs = random_inputs(torch, diagram, shape)
    timer = Timer(torch, warmup, reps)
    p = kernel.compiled_for(shape)[0]
    flops = sum(float(sum(k.cost.flops.values())) for k in p.kernels)
    moved = sum(float(k.cost.levels[1].H) for k in p.kernels)
    records = [Record(name or diagram.name, "napkin", timer(lambda: kernel(**inputs)), flops, moved,
                      float(p.time), {"kernels": len(p.kernels)})]
    records += baselines(torch, timer, name, diagram, inputs, flops, moved, baseline)
    return {"diagram": name or diagram.name, "shape": shape, "target": kernel.target.name,
            "arch": kernel.arch, "correct": verdicts, "records": [r.as_dict() for r in records]}


def baselines(torch, timer, name, diagram, inputs, flops, moved, which: str) -> list[Record]:
    out = []
    if which in ("auto", "sdpa") and name in ATTENTION:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa
        q, k, v = inputs["Q"], inputs["K"], inputs["V"]
        for label, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                               ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    seconds = timer(lambda: sdpa(q, k, v, is_causal=ATTENTION[name]))
            except RuntimeError as exc:      # a backend that refuses this shape or dtype
                out.append(Record(name, label, float("nan"), flops, moved, extra={"error": str(exc)[:200]}))
                continue
            out.append(Record(name, label, seconds, flops, moved))
    if which in ("auto", "cublas") and name in MATMUL:
        a, b = inputs["A"], inputs["B"]
        out.append(Record(name, "cublas", timer(lambda: torch.matmul(a, b)), flops, moved))
    return out


