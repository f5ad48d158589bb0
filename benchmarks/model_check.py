"""The cost model beside published measurements and beside the SASS of napkin's own kernels.

    python benchmarks/model_check.py [--targets h100,h200] [--sass] [--kernels] [--registers]
                                     [--json FILE]

For attention (d = 64 and 128, N = 512 .. 16k with b * N = 16k and h * d = 2048, as in
the FlashAttention-3 paper's benchmark; causal and not; f16) and matmul (4096^3, 8192^3)
it prints, per target, the plan's predicted time and TFLOP/s (FlashAttention's count:
4 b h N^2 d, halved when causal; 2 m k n), the bound it hit, registers and blocks per SM
and what limits them, and, on h100, the published figures beside it (no GPU: every
number is labelled `model`, `static` (from the cubin) or `published`).

--sass adds, per kernel, an issue-slot estimate from the SASS of napkin's own cubin
(NVRTC and cuobjdump, no GPU): the warp instructions of the main loop
(runtime/mainloop.py), counted statically (every path of the body once), times the chunks
and warps the plan launches, over the schedulers' issue rate; beside it the model's own
issue-slot term. It is a check of self-consistency, not a measurement: calibration
against measured times needs a GPU (benchmarks/gpu_check.py).

--kernels prints every library kernel's model issue slots beside the estimate; a CUDA-core
kernel's estimate is its block with every loop weighted by its trips (sass_simt.py).
--kernels --small does so at record_plans.py's small odd shape (dynamic axes 77 and 130
alternately) instead of the default and 4096 shapes.

--registers prints ptxas's registers per thread beside occupancy.py's estimate for every
library kernel (the evidence the estimate was fitted to).

Published figures (forward pass, f16, non-causal, H100 80GB SXM5, TFLOP/s; read off the
bar labels of Figure 5 of Shah et al., "FlashAttention-3: Fast and Accurate Attention
with Asynchrony and Low-precision", 2024, arXiv:2407.08608; the same setup: b * N = 16k,
h * d = 2048). cuBLAS f16 GEMM on H100 SXM5: about 750 TFLOP/s at 8192^3 is the commonly
reported figure (not from a paper table: marked approximate).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sass_loops import copy_trips, epilogue, kernel_source, loop_counts, scalar_version  # noqa: E402
from sass_simt import block_run  # noqa: E402
from record_plans import shapes  # noqa: E402

SEQ = (512, 1024, 2048, 4096, 8192, 16384)
PUBLISHED = {   # (d, N): {source: TFLOP/s}, FlashAttention-3 paper Figure 5 (non-causal)
    64: {"FA2": (282, 306, 318, 321, 322, 324), "cuDNN": (335, 373, 395, 408, 412, 413),
         "FA3": (333, 392, 460, 476, 496, 497)},
    128: {"FA2": (309, 350, 362, 368, 370, 370), "cuDNN": (497, 574, 617, 609, 600, 595),
          "FA3": (467, 565, 625, 638, 646, 648)},
}
CUBLAS_APPROX = {8192: 750}      # approximate, see the module docstring


def attention_shapes():
    for d in (64, 128):
        for n in SEQ:
            yield d, n, {"b": 16384 // n, "h": 2048 // d, "q": n, "x": n}


def rows(targets: list[str], sass: bool) -> list[dict]:
    import napkin
    from napkin.compiler.plan import plan
    out = []
    for tname in targets:
        for causal in (False, True):
            for i, (d, n, shape) in enumerate(attention_shapes()):
                name = "causal_attention" if causal else "attention"
                p = plan(napkin.load(name, d=d), tname, shape)
                flops = 4 * shape["b"] * shape["h"] * n * n * d / (2 if causal else 1)
                row = _row(p, f"attention d={d} N={n}{' causal' if causal else ''}", flops)
                if tname == "h100" and not causal:
                    row["published"] = {k: v[SEQ.index(n)] for k, v in PUBLISHED[d].items()}
                if sass:
                    row.update(_sass(p))
                out.append(row)
        for m in (4096, 8192):
            p = plan(napkin.load("matmul"), tname, {"m": m, "k": m, "n": m})
            row = _row(p, f"matmul {m}^3", 2.0 * m ** 3)
            if tname == "h100" and m in CUBLAS_APPROX:
                row["published"] = {"cuBLAS (approx.)": CUBLAS_APPROX[m]}
            if sass:
                row.update(_sass(p))
            out.append(row)
    return out


def _row(p, label: str, flops: float) -> dict:
    kp = max(p.kernels, key=lambda k: k.cost.time)
    time = p.time
    return {"target": p.target.name, "case": label, "engine": kp.schedule.engine,
            "model_seconds": time, "model_tflops": flops / time / 1e12,
            "bound": kp.cost.bound, "registers_model": kp.cost.registers,
            "blocks_per_sm": kp.cost.blocks_per_sm, "limit": kp.cost.occupancy_limit,
            "model_issue_seconds": dict(kp.cost.compute_parts).get("issue"),
            "model_compute_seconds": kp.cost.compute_time}


def _sass(p) -> dict:
    """The static issue-slot estimate of the plan's slowest kernel (see the docstring): every
    chunk runs the main loop's copies and iteration, a chunk the mask lets the kernel compute
    (masking.py's share) also the rest."""
    from napkin import pipeline
    options = pipeline.Options.make(target=p.target.name)
    made = pipeline.through(p, "plan", "binary", options)
    kp = max(p.kernels, key=lambda k: k.cost.time)
    return kernel_sass(p, made, p.kernels.index(kp))


def program_kernel(made, kp):
    """The program's kernel that runs plan kernel `kp`: the first of its name (a chain adding
    across blocks is followed by its conversion kernel, `napkin_k1f` after `napkin_k1`, so
    the program's kernels do not line up with the plan's by position)."""
    return next(k for k in made["program"].kernels if k.kernel == kp.kernel.name)


def kernel_sass(p, made, index: int) -> dict:
    """_sass for kernel `index` of a plan compiled through to its binary (`made`)."""
    from napkin.runtime import sass
    kp = p.kernels[index]
    name = program_kernel(made, kp).name
    text = sass.disassemble(made["binary"].cubin)
    if kp.schedule.engine == "cuda cores":
        return simt_sass(p, made, index, text)
    source = kernel_source(made["cuda"], name)
    # a chunk loop specialised by a size test: the version the plan's sizes run
    sizes = {n: int(p.sizes[a]) for n, a in made["program"].size_params}
    scalar = scalar_version(source, sizes)
    counts = loop_counts(text, name, copy_trips(source, int(scalar), sizes), scalar,
                         split="for (; c0 < cfull && (" in source)
    after = epilogue(text, name)          # once per block: the epilogue, the stores
    sched = kp.schedule
    chunks = math.ceil(p.sizes[sched.stream[0]] / sched.stream[1]) if sched.stream else 1
    blocks = launched(p, sched)
    warps = math.ceil(sched.threads / 32)
    from napkin.compiler.fractions import cut_fraction
    computed, cut = 1.0, 1.0
    if sched.stream:          # the share of chunks a mask lets the kernel compute, and cuts
        tiles = {**dict(kp.choice.group), sched.stream[0]: sched.stream[1]}
        computed = kp.cost.computed        # the model's own share (Cost.computed)
        cut = cut_fraction(kp.model.mask, p.sizes, tiles)
    if counts["inside_version"]:
        run = cut * counts["run_cut"] + (computed - cut) * counts["run_inside"]
    else:
        run = computed * counts["run"]
    # the chunk loop visits a share of the chunks (Cost.visited: the mask's first to last
    # chunk per block, codegen/masks); a visited chunk the mask hides runs the hidden path
    visited = max(float(kp.cost.visited), computed)
    per_chunk = run + (visited - computed) * counts["run_hidden"]
    rate = p.target.per_second("schedulers")
    est = blocks * warps * (chunks * per_chunk + after) / rate if rate else None
    # the model's own counts per warp per chunk, from its compute terms (issue.py): the
    # classes per computed chunk, all instructions per chunk
    parts, tgt = dict(kp.cost.compute_parts), p.target
    loops = blocks * warps * chunks * computed
    dtype = "bf16" if "bf16" in {w.dtype for w in kp.model.work} else "f16"
    # an mma.sync kernel's tensor instructions are HMMA (4096 FLOP each); a wgmma kernel's
    # HGMMA.64xNx16, which each of a warpgroup's 4 warps issues (compiler/wgmma.py)
    if kp.choice.instruction == "wgmma":
        n = dict(kp.choice.thread)[sched.site.col]
        key, per = f"wgmma_{dtype}", 2 * 16 * n * 16
    else:
        key, per = f"tensor_{dtype}", 4096
    model = {"tensor": parts.get("tensor", 0) * (tgt.rate(key) or 0) / per / loops,
             "fp32": parts.get("fp32", 0) * tgt.per_second("fp32_lanes") / 32 / loops,
             "mufu": parts.get("mufu", 0) * tgt.per_second("mufu_lanes") / 32 / loops,
             "issue": parts.get("issue", 0) * rate / (blocks * warps * chunks)}
    static = dict(counts)
    # nvcc may unroll the chunk loop (two chunks per trip of the loop it keeps, since the
    # pipeline has one barrier per chunk): the main loop then holds that many chunks' HMMA
    ratio = counts["tensor"] / model["tensor"] if model["tensor"] else 1.0
    unrolled = round(ratio) if ratio >= 1.99 and abs(ratio - round(ratio)) < 0.01 else 1
    if unrolled > 1:
        per_chunk /= unrolled
        est = blocks * warps * (chunks * per_chunk + after) / rate if rate else None
        static = {k: v / unrolled if isinstance(v, (int, float)) else v for k, v in static.items()}
        static["unrolled"] = unrolled
    static["per_chunk"] = per_chunk
    static["epilogue"] = after
    return {"static_loop_instructions": static, "static_issue_seconds": est,
            "model_loop_instructions": model}


def launched(p, sched) -> float:
    """The blocks a kernel launches: whole tiles along each woven axis (the cost's units are
    fractional where a tile is larger than its axis: GQA decode's r = 4 query heads in a
    16-row fragment, 1/4 of a unit, read the SASS 4x short of the model, which pads the
    tile; cost.py counts the launched blocks for occupancy the same way). A packed axis
    (`(r q)`, compiler/packing.py) is as long as its axes together."""
    from napkin.compiler import packing
    sizes = packing.sized(tuple((a, packing.parts(a)) for a in sched.block_tile()
                                if a not in p.sizes), p.sizes)
    return float(math.prod(math.ceil(sizes[a] / t) for a, t in sched.block_tile().items()))


def simt_sass(p, made, index: int, text: str) -> dict:
    """kernel_sass for a CUDA-core kernel: what a warp runs per block, each loop weighted by
    its trips (sass_simt.block_run: chunk loops by the plan's chunks, element loops by their
    trips per thread over nvcc's unroll), times warps and blocks, over the schedulers' rate;
    None where the SASS's loops and the CUDA's do not pair up."""
    kp, sched = p.kernels[index], p.kernels[index].schedule
    name = program_kernel(made, kp).name
    sizes = {n: int(p.sizes[a]) for n, a in made["program"].size_params}
    chunk = sched.stream[1] if sched.stream else None
    chunks = math.ceil(p.sizes[sched.stream[0]] / chunk) if sched.stream else 1
    blocks, warps = launched(p, sched), math.ceil(sched.threads / 32)
    visited = max(float(kp.cost.visited), float(kp.cost.computed))
    # (the last chunk's length: a loop over `clen` runs its mean trips, sass_simt.trips)
    tail = (chunks, int(p.sizes[sched.stream[0]]) - (chunks - 1) * chunk) if chunk else None
    run = block_run(text, name, kernel_source(made["cuda"], name), sizes, chunk, chunks,
                    warps, visited, float(kp.cost.computed), tail)
    rate = p.target.per_second("schedulers")
    est = blocks * warps * run["run"] / rate if run and rate else None
    model = dict(kp.cost.compute_parts).get("issue", 0) * rate / (blocks * warps)
    return {"static_loop_instructions": run or {}, "static_issue_seconds": est,
            "model_loop_instructions": {"per_block": model}}


def kernels_table(target: str = "h100", small: bool = False) -> list[dict]:
    """Every library kernel at the default sizes and at 4096 (`small`: at record_plans.py's
    small odd shape instead, dynamic axes 77 and 130 alternately): the model's issue-slot and
    compute time beside the SASS estimate (kernel_sass: the main loop once per chunk, copy
    loops by their trips, for the tensor-core pipelines; a CUDA-core kernel's block with each
    loop weighted by its trips, simt_sass), and attention on the CUDA cores (SIMT_ATTENTION).
    `checked`: an estimate exists (a CUDA-core kernel's SASS loops paired with its CUDA's,
    one to one or as trees: sass_align)."""
    import napkin
    from napkin import pipeline
    from napkin.compiler.plan import plan
    from napkin.diagrams.sources import library_names
    out = []
    cases = []
    for name in library_names():
        d = napkin.load(name)
        if small:
            cases.append((name, shapes(d)["small"], "auto"))
            continue
        reps = sorted({i.rep for i in d.ir.graph["axes"].values() if i.size is None})
        cases += [(name, {}, "auto"), (name, {a: 4096 for a in reps}, "auto")]
    cases += [] if small else SIMT_ATTENTION
    for name, shape, engine in cases:
        d = napkin.load(name)
        options = pipeline.Options.make(target=target, engine=engine)
        p = plan(d, target, shape, engine=engine)
        made = pipeline.through(p, "plan", "binary", options)
        for i, kp in enumerate(p.kernels):
            r = kernel_sass(p, made, i)
            issue = dict(kp.cost.compute_parts).get("issue")
            label = "default" if not shape else "4096" if set(shape.values()) == {4096} \
                else "small" if small else ",".join(f"{a}={n}" for a, n in shape.items())
            out.append({"diagram": name + ("" if engine == "auto" else f" ({engine})"),
                        "shape": label,
                        "kernel": kp.kernel.name, "engine": kp.schedule.engine,
                        "model_issue_seconds": issue,
                        "model_compute_seconds": kp.cost.compute_time,
                        "static_issue_seconds": r["static_issue_seconds"],
                        "checked": r["static_issue_seconds"] is not None})
    return out


# attention on the CUDA cores beside the library's plans: forced (--engine cuda-cores), and
# a decode step small enough that the planner takes them (b = h = q = 1: a split of the keys
# and its merge), and paged attention decoding one token at serving sizes (4 sequences, 8
# key/value heads of 4 query heads each, a cache of 2048 pages: a split and its merge too)
SIMT_ATTENTION = [("attention", {}, "cuda-cores"),
                  ("attention", {"b": 4096, "h": 4096, "q": 4096, "x": 4096}, "cuda-cores"),
                  ("causal_attention", {}, "cuda-cores"),
                  ("causal_attention", {"b": 4096, "h": 4096, "q": 4096, "x": 4096},
                   "cuda-cores"),
                  ("attention", {"b": 1, "h": 1, "q": 1, "x": 4096}, "auto"),
                  ("paged_attention", {"b": 4, "g": 8, "r": 4, "q": 1, "n": 2048}, "auto")]


def registers_table() -> list[dict]:
    """ptxas's registers per thread beside the estimate, every library kernel on h100 at the
    default sizes and at 4096."""
    import napkin
    from napkin import pipeline
    from napkin.compiler.plan import plan
    from napkin.diagrams.sources import library_names
    out = []
    options = pipeline.Options.make(target="h100")
    for name in library_names():
        d = napkin.load(name)
        reps = sorted({i.rep for i in d.ir.graph["axes"].values() if i.size is None})
        for shape in ({}, {a: 4096 for a in reps}):
            p = plan(d, "h100", shape)
            made = pipeline.through(p, "plan", "binary", options)
            by_name = {kp.kernel.name: kp for kp in p.kernels}   # (a merge run by a
            for kk in made["program"].kernels:                   # partial kernel: none)
                kp = by_name[kk.kernel]
                r = made["binary"].resources[kk.name]
                out.append({"diagram": name, "shape": "default" if not shape else "4096",
                            "kernel": kp.kernel.name, "engine": kp.schedule.engine,
                            "threads": kp.schedule.threads, "ptxas": r["registers"],
                            "spills": r["spill_stores"] + r["spill_loads"],
                            "model": round(float(kp.cost.registers), 1)})
    return out


def _print(rows_: list[dict]) -> None:
    print(f"{'target':6} {'case':30} {'engine':12} {'model us':>9} {'model TF/s':>10} "
          f"{'bound':22} {'regs':>5} {'blk/SM':>6} {'limit':13} {'published TF/s':24} "
          f"{'static/model issue':>18}")
    for r in rows_:
        pub = " ".join(f"{k} {v}" for k, v in r.get("published", {}).items())
        ratio = ""
        if r.get("static_issue_seconds") and r.get("model_issue_seconds"):
            ratio = f"{r['static_issue_seconds'] / r['model_issue_seconds']:.2f}"
        regs = "" if r["registers_model"] is None else f"{r['registers_model']:.0f}"
        print(f"{r['target']:6} {r['case']:30} {r['engine'][:12]:12} "
              f"{r['model_seconds'] * 1e6:9.1f} {r['model_tflops']:10.0f} {r['bound'][:22]:22} "
              f"{regs:>5} {r['blocks_per_sm']:6.0f} {r['limit']:13} {pub:24} {ratio:>18}")
    print("model: napkin's cost model; published: measured, cited in the docstring; "
          "static: from the cubin's SASS without running it")
    sassed = [r for r in rows_ if r.get("static_loop_instructions")]
    if sassed:
        print("\nper warp per chunk (main loop): static SASS vs model, by class "
              "(tensor = HMMA, fp32 and mufu per lane, all = every warp instruction)")
        for r in sassed:
            st, mo = r["static_loop_instructions"], r["model_loop_instructions"]
            cells = []
            for k in ("tensor", "fp32", "mufu"):
                cells.append(f"{k} {st.get(k, 0)}/{mo[k]:.0f}")
            cells.append(f"all per chunk {st.get('per_chunk', 0):.0f}/{mo['issue']:.0f}")
            print(f"  {r['target']:6} {r['case']:30} " + "  ".join(cells))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="h100,h200")
    ap.add_argument("--sass", action="store_true", help="static SASS issue-slot estimates")
    ap.add_argument("--registers", action="store_true", help="ptxas registers vs the estimate")
    ap.add_argument("--kernels", action="store_true",
                    help="every library kernel: model issue slots vs the SASS estimate")
    ap.add_argument("--small", action="store_true",
                    help="with --kernels: at the small odd shape of record_plans.py (77, 130)")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    if args.kernels:
        table = kernels_table(args.targets.split(",")[0], args.small)
        print(f"{'diagram':30} {'shape':8} {'kernel':4} {'engine':20} {'model issue us':>14} "
              f"{'model compute us':>16} {'SASS issue us':>13} {'SASS/model':>10}")
        for r in table:
            if not r["checked"]:
                print(f"{r['diagram']:30} {r['shape']:8} {r['kernel']:4} {r['engine']:20} "
                      f"{r['model_issue_seconds'] * 1e6:14.3f} "
                      f"{r['model_compute_seconds'] * 1e6:16.3f}   (SASS loops not paired "
                      "with the CUDA's: no estimate)")
                continue
            ratio = r["static_issue_seconds"] / r["model_issue_seconds"]
            mark = "" if abs(ratio - 1) <= 0.3 else "  > 30%"
            print(f"{r['diagram']:30} {r['shape']:8} {r['kernel']:4} {r['engine']:20} "
                  f"{r['model_issue_seconds'] * 1e6:14.3f} {r['model_compute_seconds'] * 1e6:16.3f} "
                  f"{r['static_issue_seconds'] * 1e6:13.3f} {ratio:10.2f}{mark}")
        print("model: napkin's cost model (issue.py); SASS: static, from the cubin without "
              "running it")
        return 0
    if args.registers:
        table = registers_table()
        for r in table:
            print(f"{r['diagram']:16} {r['shape']:8} {r['kernel']:4} {r['engine']:20} "
                  f"threads {r['threads']:4}  ptxas {r['ptxas']:3} (static)  "
                  f"model {r['model']:6.1f}  spills {r['spills']}")
        return 0
    found = rows(args.targets.split(","), args.sass)
    _print(found)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
