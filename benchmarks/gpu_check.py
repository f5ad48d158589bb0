"""The GPU check: every library kernel checked on the GPU, attention and matmul timed.

    python benchmarks/gpu_check.py --out DIR [--dry-run] [--quick] [--sample] [--diagrams A,B]
                                   [--features F,G]

On one H200 it finishes in a few minutes: it compiles every library diagram,
runs each on the GPU against the float64 reference (random data, odd shapes,
outputs pre-filled with NaN so an unwritten element shows), times attention
(b=4, h=16, q=x in 1k, 4k, 16k; d=64 and 128; f16 and bf16) against PyTorch's
SDPA (flash and cuDNN backends) and matmul (4096^3, 8192^3) against cuBLAS,
and writes DIR/gpu_check.json and a printed table.

It checks the kernels no GPU had run when they landed (`features`, benchmarks/gpu_features.py):
packed GQA rows (q = 2..8, r * q <= 16, unmasked and causal decode, split over x and not),
heads of 192 and 256 (Q re-read), a softmax over three axes, paged attention on tensor cores,
products on wgmma (opt-in: arch sm_90a, never run on a GPU), checks at odd sizes in f16 and bf16 against the float64 reference, each with the path it
exists for (packed rows, re-read, split, engine) recorded; and times the tensor-core ones at
scale (packed decode b=8 g=8 r=4 q=4 x=4k d=128, plain and causal; d=256 and 192 at b=4 h=16
N=4k; paged decode x=32k) beside the model's prediction, in the timings (`case` names them).

It times decode attention (`decode`: one query per head, h = 32 query heads on 8 key-value
heads as gqa_attention with r = 4, d = 128, f16, b in 1/8/32, keys x in 4k/32k/128k) against
SDPA (enable_gqa) and, where installed, FlashAttention's `flash_attn_with_kvcache`, and
reports each one's achieved HBM bandwidth (K and V bytes over the time) as a fraction of the
target's peak, beside the plan's split (docs/splits.md) and predicted time.

It times packed documents (`varlen`: varlen_attention over 16k tokens, h=16, d=64, f16, the
document mixes of benchmarks/varlen_check.py) planned on their ids, against causal attention
over the documents one by one (napkin's kernels and SDPA's is_causal), beside the model's
ratio (issue 18: within 1.3x), and the packed output against SDPA's per document.

It also checks the cost model's ranking (`ranking`, benchmarks/gpu_ranking.py): for attention d=64 and 128 at
N = 4096 (b=4, h=16, f16) and matmul 4096^3, it times the model's 8 fastest candidate
tilings (compiler/tiling_rank.ranked) and the chosen one, and reports each kernel's error
(predicted over measured time, minus 1), the Kendall rank correlation between predicted
and measured order, and the regret (the chosen schedule's measured time over the best
measured one).

It times pipeline depths (`stages`, benchmarks/gpu_stages.py): matmul 4096^3 at k-steps
16 and 32, rmsnorm_linear and the attention backward's slowest kernel, each 2, 3 and 4
cp.async stages deep, beside the depth the model chose: what calibrates its latencies.

It times a split's merge (`merges`, benchmarks/gpu_merges.py) as a kernel of its own and in
the partial kernel's last blocks (layernorm over 500,000 columns, cross-entropy over a
million classes), each checked against the reference, beside the model's two predictions.

It runs the gradient of a gather (`scatter`, benchmarks/gpu_scatter.py): embedding's dE as a
scatter-add, checked against the reference with duplicate and out-of-range indices, timed
beside PyTorch's embedding backward and the model (uniform tokens, and a third on one row).

It times attention's backward (`backward`, benchmarks/gpu_backward.py): the gradient at
b=4, h=16, q=x=4096 (d=64 plain and saved, d=128 plain) planned with dQ added across blocks
by atomics and without (dQ's own chain), each checked against the reference and timed beside
PyTorch's SDPA backward and the model: what calibrates the atomics' rate.

--dry-run does everything but the launches (plans, CUDA, NVRTC compiles,
references), on any machine: CI runs it, with --quick --sample.

--sample checks each library diagram in one dtype, the dtypes taken in turn (f32, f16,
bf16, f32, ...): every diagram and every dtype once, 12 checks instead of 36.

--diagrams A,B,... checks those library diagrams only (the timings and the other sections
run as without it). --features F,G,... checks and times those features only (wgmma, packed-gqa,
wide-head, softmax-3-axes, paged-tensor-cores, padded-head, padded-rows, ...); --sample
checks the first case of each, --quick times the first of each.

Device time: the whole run must fit one device session (15 minutes, machine start, wheel
install and a rerun's margin included). Without launches, --dry-run does what the GPU run
does on the host (planning, NVRTC, the float64 references) and estimates the rest: each
timing's launches, (warm-up + reps) x (predicted time + the L2 flush) for napkin and each
baseline, and CUDA and PyTorch's start; it prints the sum as `estimated device seconds`.

On the device machine only Python, CuPy, PyTorch and Triton are installed:
`bash benchmarks/wheels.sh` here puts napkin's wheel and its dependencies'
(for Python 3.12) in .whl/; carry that folder and run there

    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
    PYTHONPATH=/tmp/site python benchmarks/gpu_check.py --out "$OUT"
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_backward import _print_backward, backward  # noqa: E402
from gpu_budget import estimate  # noqa: E402
from gpu_features import feature_checks, feature_timings, print_feature_check  # noqa: E402
from gpu_merges import _print_merges, merges  # noqa: E402
from gpu_scatter import _print_scatter, scatters  # noqa: E402
from gpu_ranking import _print_ranking, kendall_tau, ranking  # noqa: E402,F401 (kendall_tau:
#   tests/runtime/test_gpu_scripts.py reads it here)
from gpu_stages import _print_stages, stages  # noqa: E402
from gpu_varlen import _print_varlen, varlen  # noqa: E402

ATTENTION_SIZES = (1024, 4096, 16384)
HEAD_DIMS = (64, 128)
DTYPES = ("f16", "bf16")
MATMUL_SIZES = (4096, 8192)
CHECK_SHAPES = {"b": 2, "h": 3, "q": 77, "x": 130, "m": 65, "k": 97, "n": 33, "t": 31, "i": 47,
                "o": 29, "r": 7, "c": 257, "f": 63, "g": 2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dry-run", action="store_true", help="everything but the launches")
    ap.add_argument("--quick", action="store_true", help="the smallest timing shapes only")
    ap.add_argument("--sample", action="store_true",
                    help="check each diagram in one dtype (taken in turn), not in all three")
    ap.add_argument("--diagrams", type=lambda s: tuple(n for n in s.split(",") if n),
                    help="check these library diagrams only (comma-separated; default: all)")
    ap.add_argument("--features", type=lambda s: tuple(n for n in s.split(",") if n),
                    help="check and time these new kernels' features only (default: all)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    report = {"dry_run": args.dry_run, "sample": args.sample, "checks": [], "timings": [],
              "errors": []}
    gpu = None if args.dry_run else _gpu()
    report["device"] = gpu
    for entry in checks(args.dry_run, args.sample, args.diagrams):
        report["checks"].append(entry)
        _print_check(entry)
    report["features"] = []
    for entry in feature_checks(args.dry_run, args.sample, args.features):
        report["features"].append(entry)
        print_feature_check(entry)
    for entry in [*timings(args.dry_run, args.quick),
                  *feature_timings(args.dry_run, args.quick, args.features)]:
        report["timings"].append(entry)
        _print_timing(entry)
    report["decode"] = []
    for entry in decode(args.dry_run, args.quick):
        report["decode"].append(entry)
        _print_decode(entry)
    report["varlen"] = []
    for entry in varlen(args.dry_run, args.quick):
        report["varlen"].append(entry)
        _print_varlen(entry)
    report["ranking"] = []
    for entry in ranking(args.dry_run):
        report["ranking"].append(entry)
        _print_ranking(entry)
    report["stages"] = []
    for entry in stages(args.dry_run, args.quick):
        report["stages"].append(entry)
        _print_stages(entry)
    report["merges"] = []
    for entry in merges(args.dry_run, args.quick):
        report["merges"].append(entry)
        _print_merges(entry)
    report["scatter"] = []
    for entry in scatters(args.dry_run, args.quick):
        report["scatter"].append(entry)
        _print_scatter(entry)
    report["backward"] = []
    for entry in backward(args.dry_run, args.quick):
        report["backward"].append(entry)
        _print_backward(entry)
    report["seconds"] = time.time() - started
    if args.dry_run:
        report["estimated_device_seconds"] = estimate(report)
        print(f"estimated device seconds (this selection): {report['estimated_device_seconds']:.0f}")
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {args.out / 'gpu_check.json'} in {report['seconds']:.0f} s")
    failed = [c for c in report["checks"] + report["features"] + report["scatter"]
              + report["backward"] if c.get("status") == "wrong"]
    return 1 if failed else 0


def _gpu():
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("no GPU: run with --dry-run")
    return torch.cuda.get_device_name()


CHECK_DTYPES = ("f32", "f16", "bf16")


def check_cases(names, sample: bool = False) -> list[tuple[str, str]]:
    """(diagram, dtype) pairs: every diagram in every dtype, or (sample) in one dtype each,
    the dtypes in turn, so that every diagram and every dtype is still checked."""
    if sample:
        return [(name, CHECK_DTYPES[i % len(CHECK_DTYPES)]) for i, name in enumerate(names)]
    return [(name, dtype) for name in names for dtype in CHECK_DTYPES]


def checks(dry_run: bool, sample: bool = False, diagrams=None):
    """Each library diagram (or each of `diagrams`) at odd shapes: compile, and (on the GPU)
    compare with the reference."""
    import napkin
    from napkin.bench import check, variant
    from napkin.diagrams.sources import library_names
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    names = library_names()
    unknown = sorted(set(diagrams or ()) - set(names))
    if unknown:
        raise SystemExit(f"--diagrams: no library diagram {', '.join(unknown)}")
    for name, dtype in check_cases([n for n in names if not diagrams or n in diagrams], sample):
        entry = {"diagram": name, "dtype": dtype}
        try:
            d = variant(name, dtype)
            axes = d.ir.graph["axes"]     # axes the diagram makes one size take their class's
            shape = {a: CHECK_SHAPES.get(axes[a].rep, 19) for a, s in d.axes.items() if s is None}
            entry["shape"] = shape
            if dry_run:
                k = Kernel(d, Options(target="h200", arch="sm_90"), backend="reference")
                res = _compile(k, shape)
                entry.update(status="compiled", resources=res)
                inputs = napkin.commands.run.random_inputs(d, shape, 1)
                napkin.runtime.reference.evaluate(d, inputs)
            else:
                import torch
                k = Kernel(d, backend="cuda")
                verdicts = check(k, torch, d, shape)
                ok = all(v["ok"] for v in verdicts.values())
                entry.update(status="ok" if ok else "wrong", verdicts=verdicts)
        except Exception as exc:   # keep going: one broken kernel must not hide the rest
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                         trace=traceback.format_exc()[-2000:])
        yield entry


def _compile(kernel, shape) -> dict:
    """NVRTC resources for these sizes (no launch)."""
    import napkin.commands.run  # noqa: F401  (random_inputs, used by the caller)
    import napkin.runtime.reference  # noqa: F401
    from napkin.runtime import nvrtc
    if not nvrtc.available():
        return {"nvrtc": "unavailable"}
    binary = kernel.binary(shape)
    return binary.resources


def timings(dry_run: bool, quick: bool):
    from napkin.bench import bench, variant
    sizes = ATTENTION_SIZES[:1] if quick else ATTENTION_SIZES
    for n in sizes:
        for dhead in HEAD_DIMS:
            for dtype in DTYPES:
                shape = {"b": 4, "h": 16, "q": n, "x": n}
                yield _time("attention", variant("attention", dtype, d=dhead), shape, dtype,
                            dry_run, bench, extra={"d": dhead})
    for n in MATMUL_SIZES[:1] if quick else MATMUL_SIZES:
        yield _time("matmul", variant("matmul", "f16"), {"m": n, "k": n, "n": n}, "f16", dry_run, bench)


def _time(name, d, shape, dtype, dry_run, bench, extra=None) -> dict:
    entry = {"diagram": name, "shape": shape, "dtype": dtype, **(extra or {})}
    try:
        from napkin.explain import report
        from napkin.kernel import Kernel
        from napkin.pipeline import Options
        k = Kernel(d, Options(target="h200", arch="sm_90"), backend="reference")
        p = k.compiled_for(shape)[0]
        entry["engines"] = [kr["engine"]["kind"] for kr in report(p)["kernels"]]
        if dry_run:
            entry.update(status="planned", predicted_seconds=p.time,
                         flops=sum(float(sum(kp.cost.flops.values())) for kp in p.kernels),
                         resources=_compile(k, shape))
        else:
            result = bench(d, shape, name=name)
            entry.update(status="ok", correct=result["correct"], records=result["records"])
    except Exception as exc:
        entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                     trace=traceback.format_exc()[-2000:])
    return entry


DECODE_BATCHES = (1, 8, 32)
DECODE_KEYS = (4096, 32768, 131072)
DECODE_HEADS = (8, 4)          # key-value heads g, query heads per key-value head r: h = 32


def decode(dry_run: bool, quick: bool):
    """Decode attention (q = 1): napkin's plan (split keys) against SDPA and flash-attn."""
    from napkin.bench import variant
    from napkin.compiler.target import load
    g, r = DECODE_HEADS
    peak = load("h200").levels[1].bandwidth
    for b in DECODE_BATCHES[:1] if quick else DECODE_BATCHES:
        for x in DECODE_KEYS[:1] if quick else DECODE_KEYS:
            shape = {"b": b, "g": g, "r": r, "q": 1, "x": x}
            entry = {"diagram": "gqa_attention", "shape": shape, "d": 128, "dtype": "f16",
                     "kv_bytes": 2 * b * g * x * 128 * 2, "peak_bytes_per_second": peak}
            try:
                entry.update(_decode(variant("gqa_attention", "f16", d=128), shape, dry_run,
                                     entry["kv_bytes"], peak))
            except Exception as exc:
                entry.update(status="error", error=f"{type(exc).__name__}: {exc}",
                             trace=traceback.format_exc()[-2000:])
            yield entry


def _decode(d, shape, dry_run, kv_bytes, peak) -> dict:
    from napkin.kernel import Kernel
    from napkin.pipeline import Options
    k = Kernel(d, Options(target="h200", arch="sm_90"), backend="reference" if dry_run else "cuda")
    p = k.compiled_for(shape)[0]
    out = {"predicted_seconds": p.time, "kernels": len(p.kernels),
           "split": None if p.split is None else {"axis": p.split.axis, "parts": p.split.parts}}
    if dry_run:
        out.update(status="planned", resources=_compile(k, shape))
        return out
    import torch
    from napkin.bench import Timer, check, random_inputs
    out["correct"] = check(k, torch, d, {**shape, "x": min(shape["x"], 1000)})
    inputs = random_inputs(torch, d, shape)
    timer = Timer(torch)
    q, kk, v = inputs["Q"], inputs["K"], inputs["V"]
    b, g, r, _, _ = q.shape
    records = {"napkin": timer(lambda: k(**inputs))}
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    q4 = q.reshape(b, g * r, 1, 128)
    try:
        records["sdpa"] = timer(lambda: sdpa(q4, kk, v, enable_gqa=True))
    except (RuntimeError, TypeError) as exc:
        out["sdpa_error"] = str(exc)[:200]
    try:
        from flash_attn import flash_attn_with_kvcache
        qf = q4.transpose(1, 2).contiguous()                 # [b 1 h d]
        kf, vf = (t.transpose(1, 2).contiguous() for t in (kk, v))   # [b x g d]
        records["flash_attn_with_kvcache"] = timer(lambda: flash_attn_with_kvcache(qf, kf, vf))
    except ImportError:
        out["flash_attn"] = "not installed"
    out["records"] = {name: {"seconds": s, "hbm_fraction": kv_bytes / s / peak}
                      for name, s in records.items()}
    out["status"] = "ok"
    return out


def _print_decode(e) -> None:
    s = e["shape"]
    head = f"decode b={s['b']} x={s['x']}"
    if e.get("status") == "error":
        print(f"{head}: ERROR {e['error']}")
        return
    split = e.get("split")
    how = f"split {split['axis']} by {split['parts']}" if split else "unsplit"
    line = f"{head}: {e['kernels']} kernel(s), {how}, predicted {e['predicted_seconds'] * 1e6:.1f} us"
    for name, rec in (e.get("records") or {}).items():
        line += f"; {name} {rec['seconds'] * 1e6:.1f} us ({rec['hbm_fraction']:.0%} of HBM peak)"
    print(line)


def _print_check(e) -> None:
    print(f"check {e['diagram']:<18} {e['dtype']:<5} {e.get('status')}"
          + (f"  {e.get('error', '')[:120]}" if e.get("status") == "error" else ""))
    sys.stdout.flush()


def _print_timing(e) -> None:
    head = (f"time  {e.get('case', e['diagram']):<10} {e['dtype']:<5} {json.dumps(e['shape'])} "
            f"[{', '.join(e.get('engines', []))}]")
    if e.get("status") == "planned":
        print(f"{head}  planned, predicted {e['predicted_seconds']:.4g} s")
    elif e.get("status") == "ok":
        for r in e["records"]:
            tf = f"{r['tflops']:.1f} TFLOP/s" if r.get("tflops") else ""
            model = (f"  (model {r['predicted_seconds'] * 1e3:.3f} ms)"
                     if r.get("predicted_seconds") else "")
            print(f"{head}  {r['source']:<11} {r['seconds'] * 1e3:9.3f} ms  {tf}{model}")
    else:
        print(f"{head}  {e.get('status')}: {e.get('error', '')[:160]}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
