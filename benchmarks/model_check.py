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
import collections
import json
import math
import sys

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


def loop_counts(sass_text: str, function: str | None = None, trips: list | None = None
                ) -> collections.Counter:
    """Instruction classes of the main loop, the loop over whole chunks (runtime/mainloop.py's
    rule, issue 14's): tensor (HMMA), fp32 (the FP32 pipe, with F2FP packing), mufu, every
    counted instruction (`all`, static: every path once), `hidden`: those a chunk the mask
    hides runs (all but the compute the kernel branches around, codegen/mma.py's
    `if (!skip)`), and, given `trips` (copies per thread of each copy statement, from the
    CUDA: copy_trips), `run` and `run_hidden`: the same with each copy loop counted as a trip
    of t copies runs it (setup + t x each, copy_loops) instead of its static code."""
    from napkin.runtime import mainloop
    loop = mainloop.main_loop(sass_text, function)
    if loop is None:
        return collections.Counter()
    counts = loop.counts()
    packs = sum(1 for i in loop.instructions if i.opcode.startswith("F2FP"))
    out = collections.Counter({"tensor": counts["mma"], "fp32": counts["fp32"] + packs,
                               "mufu": counts["mufu"], "all": len(loop.instructions),
                               "hidden": len(loop.instructions) - len(skipped(loop))})
    # a chunk computes one of two versions of its scores (codegen/flash.py: without the mask
    # where it holds everywhere, with it where it cuts): each path counts its own version
    small, large = versions(loop)
    out["inside_version"], out["cut_version"] = small, large
    found = copy_loops(loop)
    if trips is not None and found and len(found) == len(trips):
        runs = [c["setup"] + t * c["each"] for c, t in zip(found, trips)]
        delta = sum(r - c["static"] for c, r in zip(found, runs))
        out["run"], out["run_hidden"] = out["all"] + delta, out["hidden"] + delta
        # a hidden chunk does not prefetch a hidden next one (codegen/mma.py): its copies
        # run where the next chunk is computed, which the computed chunks' count holds
        out["run_hidden"] -= sum(runs)
        out["copy_loops"] = len(found)
    else:                     # no copy loop told apart: the static count stands
        out["run"], out["run_hidden"] = out["all"], out["hidden"]
    out["run_cut"], out["run_inside"] = out["run"] - small, out["run"] - large
    return out


def versions(loop) -> tuple[int, int]:
    """(instructions of the smaller, of the larger) of two alternatives the loop branches
    between, `if (t) {A} else {B}` with no tensor instruction in either (a conditional
    forward branch to B, whose previous instruction branches forward past B), the largest
    such pair; (0, 0) when there is none."""
    from napkin.runtime import mainloop
    body = loop.instructions
    at = {i.address: k for k, i in enumerate(body)}
    best = (0, 0)
    for k, b in enumerate(body):
        if b.target is None or b.target <= b.address or not b.predicate or b.target not in at:
            continue
        t = at[b.target]
        jump = body[t - 1] if t > 0 else None
        if jump is None or jump.target is None or jump.target <= jump.address or jump.predicate \
                or jump.target not in at:
            continue
        first, second = body[k + 1:t], body[t:at[jump.target]]
        if any(i.opcode.split(".")[0] in mainloop.TENSOR for i in first + second):
            continue
        pair = tuple(sorted((len(first), len(second))))
        if sum(pair) > sum(best):
            best = pair
    return best


def copy_loops(loop) -> list[dict]:
    """The copies into shared memory in `loop`, one per copy statement of the lowering
    (`for (e = tid; e < N; e += threads)` of cp.async, codegen/mma.py), as nvcc compiles a
    loop whose trip count it cannot know: up to three peeled copies, then a loop unrolled by
    four. Per statement: `static`, the instructions of its code (from the end of the one
    before, or the loop's start, to its unrolled loop's backward branch), `each`, those of
    one copy (the unrolled loop over its LDGSTS), and `setup`, the rest (static less one
    `each` per LDGSTS)."""
    from napkin.runtime import mainloop
    body = loop.instructions
    inner = [i for i in body if i.target is not None and i.target <= i.address
             and i.address < loop.end and i.predicate != "@!PT"]
    out, start = [], loop.start
    for br in sorted(inner, key=lambda i: i.address):
        unrolled = [i for i in body if br.target <= i.address <= br.address]
        n = sum(1 for i in unrolled if i.opcode.startswith("LDGSTS"))
        if not n or any(i.opcode.split(".")[0] in mainloop.TENSOR for i in unrolled):
            continue
        code = [i for i in body if start <= i.address <= br.address]
        if any(i.opcode.split(".")[0] in mainloop.TENSOR for i in code):
            code = [i for i in code if i.address >= max(
                j.address for j in code if j.opcode.split(".")[0] in mainloop.TENSOR)]
        ldgsts = sum(1 for i in code if i.opcode.startswith("LDGSTS"))
        each = len(unrolled) / n
        out.append({"static": len(code), "each": each, "setup": len(code) - ldgsts * each,
                    "ldgsts": ldgsts})
        start = br.address + 1
    return out


def kernel_source(cuda: str, name: str) -> str:
    """The text of kernel `name` in a .cu file of several: from its `__global__` to the next."""
    import re
    at = re.search(r"__global__[^{;]*?\b" + re.escape(name) + r"\(", cuda)
    if at is None:
        return ""
    end = cuda.find("__global__", at.end())
    return cuda[at.start():end if end >= 0 else len(cuda)]


def copy_trips(cuda: str) -> list[int]:
    """Copies each thread makes per chunk, per copy statement of the chunk loop, read off the
    emitted CUDA: `for (int r = 0; r < R; ++r) { ... }` holding a cp.async
    (codegen/tiles.py), R."""
    import re
    start = re.search(r"for \((?:int|long long) c0 = ", cuda)
    if start is None:
        return []
    end = cuda.find("napkin_cp_async_commit", start.end())
    text, out = cuda[start.end():end], []
    for m in re.finditer(r"for \(int r = 0; r < (\d+); \+\+r\) \{", text):
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if "napkin_cp_async_16" in text[m.end():j]:
            out.append(int(m[1]))
    return out


def skipped(loop) -> list:
    """The instructions of `loop` inside the innermost forward branch that jumps over all its
    tensor instructions (a hidden chunk's skip), or none when no branch does."""
    from napkin.runtime import mainloop
    mma = [i.address for i in loop.instructions if i.opcode.split(".")[0] in mainloop.TENSOR]
    if not mma:
        return []
    around = [(i.address, i.target) for i in loop.instructions
              if i.target is not None and i.target > i.address and i.address < min(mma)
              and i.target > max(mma) and i.target <= loop.end]
    if not around:
        return []
    start, end = min(around, key=lambda r: r[1] - r[0])
    return [i for i in loop.instructions if start < i.address < end]


def _sass(p) -> dict:
    """The static issue-slot estimate of the plan's slowest kernel (see the docstring): every
    chunk runs the main loop's copies and iteration, a chunk the mask lets the kernel compute
    (masking.py's share) also the rest."""
    from napkin import pipeline
    options = pipeline.Options.make(target=p.target.name)
    made = pipeline.through(p, "plan", "binary", options)
    kp = max(p.kernels, key=lambda k: k.cost.time)
    return kernel_sass(p, made, p.kernels.index(kp))


def kernel_sass(p, made, index: int) -> dict:
    """_sass for kernel `index` of a plan compiled through to its binary (`made`)."""
    from napkin.runtime import sass
    kp = p.kernels[index]
    name = made["program"].kernels[index].name
    counts = loop_counts(sass.disassemble(made["binary"].cubin), name,
                         copy_trips(kernel_source(made["cuda"], name)))
    sched = kp.schedule
    chunks = math.ceil(p.sizes[sched.stream[0]] / sched.stream[1]) if sched.stream else 1
    blocks = float(kp.cost.levels[1].units)
    warps = math.ceil(sched.threads / 32)
    from napkin.compiler.masking import cut_fraction
    computed, cut = 1.0, 1.0
    if sched.stream:          # the share of chunks a mask lets the kernel compute, and cuts
        tiles = {**dict(kp.choice.group), sched.stream[0]: sched.stream[1]}
        computed = kp.cost.computed        # the model's own share (Cost.computed)
        cut = cut_fraction(kp.model.mask, p.sizes, tiles)
    if counts["inside_version"]:
        run = cut * counts["run_cut"] + (computed - cut) * counts["run_inside"]
    else:
        run = computed * counts["run"]
    per_chunk = run + (1 - computed) * counts["run_hidden"]
    rate = p.target.per_second("schedulers")
    est = blocks * warps * chunks * per_chunk / rate if rate else None
    # the model's own counts per warp per chunk, from its compute terms (issue.py): the
    # classes per computed chunk, all instructions per chunk
    parts, tgt = dict(kp.cost.compute_parts), p.target
    loops = blocks * warps * chunks * computed
    dtype = "bf16" if "bf16" in {w.dtype for w in kp.model.work} else "f16"
    model = {"tensor": parts.get("tensor", 0) * (tgt.rate(f"tensor_{dtype}") or 0) / 4096 / loops,
             "fp32": parts.get("fp32", 0) * tgt.per_second("fp32_lanes") / 32 / loops,
             "mufu": parts.get("mufu", 0) * tgt.per_second("mufu_lanes") / 32 / loops,
             "issue": parts.get("issue", 0) * rate / (blocks * warps * chunks)}
    static = dict(counts)
    static["per_chunk"] = per_chunk
    return {"static_loop_instructions": static, "static_issue_seconds": est,
            "model_loop_instructions": model}


def kernels_table(target: str = "h100") -> list[dict]:
    """Every library kernel at the default sizes and at 4096: the model's issue-slot and
    compute time beside the SASS estimate (kernel_sass). The estimate's rule (the main loop
    once per chunk, copy loops by their trips) describes the tensor-core pipelines; a CUDA-core
    kernel's chunk holds inner loops over elements (copies, lanes over a chunk) whose trips
    the rule does not weight, so its rows are printed but not a check."""
    import napkin
    from napkin import pipeline
    from napkin.compiler.plan import plan
    from napkin.diagrams.sources import library_names
    options = pipeline.Options.make(target=target)
    out = []
    for name in library_names():
        d = napkin.load(name)
        reps = sorted({i.rep for i in d.ir.graph["axes"].values() if i.size is None})
        for shape in ({}, {a: 4096 for a in reps}):
            p = plan(d, target, shape)
            made = pipeline.through(p, "plan", "binary", options)
            for i, kp in enumerate(p.kernels):
                r = kernel_sass(p, made, i)
                issue = dict(kp.cost.compute_parts).get("issue")
                out.append({"diagram": name, "shape": "default" if not shape else "4096",
                            "kernel": kp.kernel.name, "engine": kp.schedule.engine,
                            "model_issue_seconds": issue,
                            "model_compute_seconds": kp.cost.compute_time,
                            "static_issue_seconds": r["static_issue_seconds"],
                            "checked": kp.schedule.engine != "cuda cores"})
    return out


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
            for kp, kk in zip(p.kernels, made["program"].kernels):
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
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)
    if args.kernels:
        table = kernels_table(args.targets.split(",")[0])
        print(f"{'diagram':25} {'shape':8} {'kernel':4} {'engine':20} {'model issue us':>14} "
              f"{'model compute us':>16} {'SASS issue us':>13} {'SASS/model':>10}")
        for r in table:
            ratio = r["static_issue_seconds"] / r["model_issue_seconds"]
            mark = ("" if abs(ratio - 1) <= 0.3 else "  > 30%") if r["checked"] else \
                "  (CUDA cores: not weighted)"
            print(f"{r['diagram']:25} {r['shape']:8} {r['kernel']:4} {r['engine']:20} "
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
