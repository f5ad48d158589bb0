"""The main loop of napkin's tensor-core kernels beside Triton's, counted in SASS (no GPU).

    python benchmarks/sass_report.py [--arch sm_80|sm_90] [--no-triton] [--json PATH]
                                     [--only LABEL ...]

For each library kernel at a realistic shape (attention and causal attention at
d = 64 and 128, GQA, matmul 4096^3 and 8192^3, linear_gelu, rmsnorm_linear), napkin's cubin is built
with NVRTC and disassembled with cuobjdump; `runtime/mainloop.py` finds the main loop
(the innermost backward-branch loop holding the most HMMA) and classifies its
instructions, once each, both sides of every branch. Beside them, Triton kernels of
the same tile shapes, written here after the structure of Triton's tutorials (an
online-softmax attention forward and a pipelined matmul), compiled by Triton for the
same architecture with no GPU (`pip install triton`: a benchmark-only dependency,
never imported by napkin).

Every figure is a static count of machine code, not a measurement: HMMA, LDSM,
LDGSTS, shared and global memory, SHFL, MUFU, FP32, integer/address, conversions,
barriers and control per main-loop iteration per warp; non-MMA instructions per
HMMA (the issue-slot pressure beside each tensor instruction); instructions per
attention score; registers, spills, shared memory (ptxas) and resident blocks per
SM (registers, shared memory and threads against the SM's limits).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

from napkin.pipeline import Options, through
from napkin.runtime import mainloop, sass

CLASSES = ["mma", "ldsm", "ldgsts", "smem", "global", "shfl", "mufu", "fp32", "int", "convert",
           "barrier", "control"]

# per-SM limits (CUDA C++ Programming Guide, compute capability tables)
SM = {"sm_80": {"regs": 65536, "smem": 164 * 1024, "threads": 2048, "blocks": 32},
      "sm_90": {"regs": 65536, "smem": 228 * 1024, "threads": 2048, "blocks": 32}}

LONG = {"b": 4, "h": 16, "q": 4096, "x": 4096}
DECODE = {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096}
GQA_CAUSAL = ("axis b, g, r, q, x\naxis d = 128\nin Q[b g r q d]: f16\nin K[b g x d]: f16\n"
              "in V[b g x d]: f16\nS[b g r q x] = where(x <= q + size(x) - size(q), "
              "Q * K / sqrt(size(d)), -inf)\nP[b g r q x] = softmax[x](S)\nO[b g r q d] = P * V\n"
              "out O: f16")
NAPKIN = [
    # label, diagram, shape, -D
    ("attention d=64", "attention", LONG, {"d": 64}),
    ("attention d=128", "attention", LONG, {"d": 128}),
    ("causal d=64", "causal_attention", LONG, {"d": 64}),
    ("causal d=128", "causal_attention", LONG, {"d": 128}),
    # heads whose O accumulator fills half a lane's registers or more: Q re-read, 16 rows a warp
    ("attention d=192", "attention", LONG, {"d": 192}),
    ("attention d=256", "attention", LONG, {"d": 256}),
    # a head that is no multiple of 16, padded to 48 in shared memory (compiler/headpad.py),
    # beside the head of 48
    ("attention d=40", "attention", LONG, {"d": 40}),
    ("attention d=48", "attention", LONG, {"d": 48}),
    # rows of 72 bytes, copied 8 bytes at a time (compiler/copies.vector_values); and a head
    # of five 16-wide slices held beside the scores (occupancy.HELD_SLICE_REGISTERS)
    ("attention d=36", "attention", LONG, {"d": 36}),
    ("attention d=72", "attention", LONG, {"d": 72}),
    ("causal d=256", "causal_attention", LONG, {"d": 256}),
    ("gqa d=64 (8 kv heads x 4)", "gqa_attention", {"b": 4, "g": 8, "r": 4, "q": 4096, "x": 4096}, {"d": 64}),
    # decoding with GQA, rows packed r x q = 16 (compiler/packing.py), keys split; and under
    # speculative decoding's causal mask, each row's q read from the lane's table (not divided)
    ("gqa decode packed d=128", "gqa_attention", DECODE, {"d": 128}),
    ("gqa decode packed causal d=128", GQA_CAUSAL, DECODE, {}),
    ("matmul 4096^3", "matmul", {"m": 4096, "n": 4096, "k": 4096}, {}),
    ("matmul 8192^3", "matmul", {"m": 8192, "n": 8192, "k": 8192}, {}),
    ("linear_gelu 4096^3", "linear_gelu", {"t": 4096, "i": 4096, "o": 4096}, {}),
    # RMSNorm fused into the product: X * g computed as staged, the rows' mean beside it
    ("rmsnorm_linear 4096^3", "rmsnorm_linear", {"t": 4096, "i": 4096, "o": 4096}, {}),
    # the plain gradient of attention: the forward (with D), the dQ and the dK/dV chains
    ("attention backward d=64", "grad:attention", LONG, {"d": 64}),
]


def occupancy(arch: str, registers: int, threads: int, smem: int) -> tuple[int, str]:
    """Resident blocks per SM and what limits them (registers allocated per warp in 256s)."""
    lim = SM["sm_90" if arch.startswith("sm_9") else "sm_80"]
    warps = math.ceil(threads / 32)
    per_warp = math.ceil(max(registers, 1) * 32 / 256) * 256
    by = {"registers": lim["regs"] // (per_warp * warps),
          "shared memory": lim["smem"] // smem if smem else lim["blocks"],
          "threads": lim["threads"] // threads, "blocks": lim["blocks"]}
    limit = min(by, key=by.get)
    return by[limit], limit


def napkin_rows(arch: str, target: str, only=()) -> list[dict]:
    rows = []
    for label, name, shape, defines in NAPKIN:
        if only and not any(o in label for o in only):
            continue
        scored = any(w in f"{label} {name}" for w in ("attention", "causal"))  # scores a warp and chunk
        if name.startswith("grad:"):      # the gradient's diagram text, its sizes set in it
            import napkin
            name, defines = napkin.grad(napkin.load(name[5:], **defines)).source.text, {}
        made = through(name, None, "binary", Options.make(target=target, arch=arch, shape=shape,
                                                          defines=defines))
        binary, program, plan = made["binary"], made["program"], made["plan"]
        text = sass.disassemble(binary.cubin)
        sizes = {param: plan.sizes[axis] for param, axis in program.size_params}
        by_name = {kp.kernel.name: kp for kp in plan.kernels}   # (a merge run in a partial
        for k in program.kernels:                               # kernel has no program)
            kp = by_name[k.kernel]
            res = binary.resources[k.name]
            smem = res["smem_bytes"] + k.smem_bytes(sizes)
            loop = mainloop.main_loop(text, k.name)
            row = {"kernel": f"napkin {label}" + (f" [{k.name}]" if len(program.kernels) > 1 else ""),
                   "engine": kp.schedule.engine,
                   "registers": res["registers"], "spills": res["spill_stores"] + res["spill_loads"],
                   "stack": res["stack_bytes"],
                   "smem": smem, "threads": k.threads}
            row.update(_loop_figures(loop, k.threads, arch, res["registers"], smem,
                                     _scores(kp) if scored else None))
            rows.append(row)
    return rows


def _scores(kp) -> int | None:
    """Attention scores one warp computes per main-loop iteration: the block's rows (the
    library's query axes q and r, or a chain's row axis) times the chunk, over the warps."""
    s = kp.schedule
    if not s.stream:
        return None
    row = getattr(s.site, "row", None)     # a chain's rows: the keys in the dK/dV half
    rows = math.prod(t for a, t in s.tile if a in ("q", "r") or a == row)
    warps = math.prod(w for _, w in s.warps) if s.warps else max(1, s.threads // 32)
    return rows * s.stream[1] // warps


def _loop_figures(loop, threads: int, arch: str, registers: int, smem: int, scores) -> dict:
    blocks, limit = occupancy(arch, registers, threads, smem)
    out = {"blocks_per_sm": blocks, "occupancy_limit": limit}
    if loop is None:
        return out
    counts = loop.counts()
    total = sum(counts.values())
    out["loop"] = {c: counts.get(c, 0) for c in CLASSES}
    out["loop_instructions"] = total
    if loop.mma:         # per m16n8k16 HMMA equivalent (a wgmma kernel's HGMMA is N/8 of them)
        out["non_mma_per_hmma"] = round((total - loop.mma) / loop.hmma_16816, 2)
    if scores:
        out["instructions_per_score"] = round(total * 32 / scores, 2)
    return out


def triton_rows(arch: str) -> list[dict]:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    try:
        import triton
    except ImportError:
        print("(Triton is not installed: pip install triton to compare)", file=sys.stderr)
        return []
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    import triton_kernels as tk
    cc = int(arch[3:5])
    rows = []
    for label, fn, sig, consts, warps, stages, scores in tk.CASES:
        # what Triton's launcher specialises on a real call: 16-byte-aligned tensors and sizes
        # and strides divisible by 16 (every integer these kernels take, at these shapes) get
        # tt.divisibility=16; without it Triton cannot vectorise its loads (scalar LDG + STS,
        # no cp.async, spills): a baseline weaker than the one a user runs
        attrs = {(i,): [["tt.divisibility", 16]] for i, ty in enumerate(sig.values())
                 if ty.startswith("*") or ty == "i32"}
        compiled = triton.compile(ASTSource(fn, sig, constexprs=consts, attrs=attrs),
                                  target=GPUTarget("cuda", cc, 32),
                                  options={"num_warps": warps, "num_stages": stages})
        text = sass.disassemble(compiled.asm["cubin"])
        regs, stack = _res_usage(compiled.asm["cubin"])
        smem = compiled.metadata.shared
        row = {"kernel": f"triton {triton.__version__} {label}", "engine": "", "registers": regs,
               "spills": None, "stack": stack, "smem": smem, "threads": warps * 32}
        row.update(_loop_figures(mainloop.main_loop(text), warps * 32, arch, regs or 255, smem,
                                 scores // warps if scores else None))
        rows.append(row)
    return rows


def _res_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers, stack bytes) of a cubin's kernel from `cuobjdump -res-usage` (Triton knows
    its register count only once a GPU loads the kernel)."""
    import re
    import subprocess
    import tempfile
    _, path = sass.find_tool("cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        out = subprocess.run([path, "-res-usage", fh.name], capture_output=True, text=True, timeout=120).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def _print(rows: list[dict], arch: str) -> None:
    print(f"main-loop instruction mix per iteration per warp, static SASS counts ({arch}; "
          "no GPU: counts, not timings)\n")
    head = f"{'kernel':44} " + " ".join(f"{c[:6]:>6}" for c in CLASSES) + \
        f" {'total':>6} {'nonMMA/HMMA':>11} {'insn/score':>10}"
    print(head)
    for r in rows:
        loop = r.get("loop")
        if loop is None:
            print(f"{r['kernel'][:44]:44} (no loop found)")
            continue
        print(f"{r['kernel'][:44]:44} " + " ".join(f"{loop[c]:>6}" for c in CLASSES)
              + f" {r['loop_instructions']:>6} {r.get('non_mma_per_hmma', '-'):>11} "
                f"{r.get('instructions_per_score', '-'):>10}")
    print(f"\n{'kernel':44} {'regs':>5} {'spills':>6} {'stack':>5} {'smem':>8} {'threads':>7} {'blocks/SM':>9}  limit")
    for r in rows:
        spills = r["spills"] if r["spills"] is not None else "-"
        print(f"{r['kernel'][:44]:44} {r['registers'] or '-':>5} {spills:>6} {r.get('stack', '-'):>5} "
              f"{r['smem']:>8} {r['threads']:>7} {r['blocks_per_sm']:>9}  {r['occupancy_limit']}")
    print("\n(napkin: ptxas's report; Triton: cuobjdump -res-usage, whose STACK is the local-memory "
          "frame: spills and arrays. blocks/SM from registers (allocated per warp in 256s), shared "
          "memory and threads against the SM's limits.)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="sm_80", choices=("sm_80", "sm_90"))
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--json", dest="json_path")
    ap.add_argument("--only", action="append", default=[],
                    help="napkin's kernels whose label contains this (repeatable)")
    args = ap.parse_args(argv)
    target = "a100" if args.arch == "sm_80" else "h100"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    rows = napkin_rows(args.arch, target, args.only) + \
        ([] if args.no_triton else triton_rows(args.arch))
    _print(rows, args.arch)
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
