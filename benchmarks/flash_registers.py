"""ptxas's registers for FlashAttention-2 tilings (compiler/flash.py) beside the budget and
occupancy.py's estimate.

    python benchmarks/flash_registers.py [--json FILE] [--quick | --padded]

The data flash.py's re-read budget (REREAD_SCORE_WEIGHT, REREAD_MAX_REGISTERS) and
occupancy.ATTENTION_HIGH are fitted to: attention (plain and causal) with heads of 192 and
256 and dk 192 with dv 128, at b=4, h=16, q=x=4096 on h100, each planned with one tiling
forced in turn (block rows, warps, chunk, Q held or re-read: the search's table and its
budget are this script's while it plans, restored after each), including tilings beyond
the budget, so that what spills is compiled too. Every kernel is compiled by NVRTC for
sm_90 (needs the NVRTC wheel, no GPU) and printed with its fragment registers, its budget,
ptxas's registers and spills, and the estimate. Static figures: nothing here runs a kernel.

`--padded`: the data of occupancy.HELD_SLICE_REGISTERS instead: heads dk and dv each of 40,
56, 64, 72, 80, 96, 104 (value fragments odd and even, dk padded to 16: compiler/headpad.py),
Q held, at one fragment a warp and 64 or 128 keys and two and 32 or 64 (PADDED_TILINGS),
not causal; it exits 1 where a kernel spills that the estimate puts within 255.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import numpy as np

LONG = {"b": 4, "h": 16, "q": 4096, "x": 4096}
HEADS = ((256, 256), (192, 192), (192, 128))
PADDED_HEADS = tuple((dk, dv) for dk in (40, 56, 64, 72, 80, 96, 104)
                     for dv in (40, 56, 64, 72, 80, 96, 104))
PADDED_TILINGS = ((128, 8, 128), (64, 4, 128), (128, 8, 64), (256, 8, 64), (128, 4, 32))
TILINGS = ((64, 4, 16), (64, 4, 32), (64, 4, 64), (128, 8, 16), (128, 8, 32), (128, 8, 64),
           (128, 4, 32))


def diagram(dk: int, dv: int, causal: bool):
    import napkin
    scores = "Q * K / sqrt(size(d))"
    if causal:
        scores = f"where(x <= q, {scores}, -inf)"
    return napkin.load(
        f"axis b, h, q, x\naxis d = {dk}\naxis e = {dv}\nin Q[b h q d]: f16\n"
        f"in K[b h x d]: f16\nin V[b h x e]: f16\nS[b h q x] = {scores}\n"
        f"P[b h q x] = softmax[x](S)\nO[b h q e] = P * V\nout O: f16")


def rows(quick: bool = False, padded: bool = False) -> list[dict]:
    from napkin import pipeline
    from napkin.compiler import flash, kernel_plan, occupancy, tensorcore
    from napkin.compiler.plan import plan
    opts = pipeline.Options.make(target="h100")
    kept = flash.TILINGS, flash.MAX_REGISTERS, flash.REREAD_MAX_REGISTERS, flash.REREAD_MARGIN
    high, held = occupancy.ATTENTION_HIGH, occupancy.HELD_SLICE_REGISTERS
    out = []
    cases = itertools.product(HEADS[:1] if quick else HEADS, (False, True), TILINGS,
                              (False, True))
    if padded:
        cases = itertools.product(PADDED_HEADS, (False,), PADDED_TILINGS, (False,))
    try:
        for (dk, dv), causal, (bm, wm, chunk), reread in cases:
            flash.TILINGS = np.array([(bm, wm, chunk)])
            # only this form: the other's budget nil; the estimate held low while planning
            # (past 255 the cost model fits no plan), computed after
            flash.MAX_REGISTERS = 0 if reread else 10_000
            flash.REREAD_MAX_REGISTERS = 10_000 if reread else 0
            flash.REREAD_MARGIN = -np.inf if reread else 0.05
            occupancy.ATTENTION_HIGH, occupancy.HELD_SLICE_REGISTERS = (100.0, 0.0), 0.0
            kernel_plan._FOUND.clear()      # (plans memoised by problem, not by this table)
            p = plan(diagram(dk, dv, causal), "h100", LONG)
            flash.MAX_REGISTERS, flash.REREAD_MAX_REGISTERS = kept[1:3]
            occupancy.ATTENTION_HIGH, occupancy.HELD_SLICE_REGISTERS = high, held
            kps = [kp for kp in p.kernels if kp.schedule.engine == "attention"]
            if not kps:
                continue
            (kp,) = kps
            site = tensorcore.site(p.graph, kp.kernel, kp.model, p.target, p.sizes)
            fm = bm // wm // flash.FRAG_ROWS
            made = pipeline.through(p, "plan", "binary", opts)
            (res,) = made["binary"].resources.values()
            out.append({"dk": dk, "dv": dv, "causal": causal, "rows": bm, "warps": wm,
                        "chunk": chunk, "reread": reread,
                        "fragments": float(flash.registers(fm, chunk, site, reread)),
                        "budget": float(flash.budget(fm, chunk, site, reread)),
                        "fits": bool(flash.fits(fm, chunk, site, reread)),
                        "estimate": float(occupancy.registers(kp.model, kp.choice, p.sizes, 0.0)),
                        "registers": res["registers"],
                        "spills": res["spill_stores"] + res["spill_loads"]})
        kernel_plan._FOUND.clear()
    finally:
        flash.TILINGS, flash.MAX_REGISTERS, flash.REREAD_MAX_REGISTERS, flash.REREAD_MARGIN = kept
        occupancy.ATTENTION_HIGH, occupancy.HELD_SLICE_REGISTERS = high, held
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", dest="json_path")
    ap.add_argument("--quick", action="store_true", help="the head of 256 only")
    ap.add_argument("--padded", action="store_true",
                    help="heads of 40 to 104, Q held (occupancy.HELD_SLICE_REGISTERS)")
    args = ap.parse_args(argv)
    found = rows(args.quick, args.padded)
    print(f"{'dk':>4}{'dv':>5} causal rows warps chunk  Q        frags budget fits "
          f"estimate ptxas spills")
    for r in found:
        print(f"{r['dk']:>4}{r['dv']:>5} {'yes' if r['causal'] else 'no':>6}{r['rows']:>5}"
              f"{r['warps']:>6}{r['chunk']:>6}  {'re-read' if r['reread'] else 'held':<8}"
              f"{r['fragments']:>6.0f}{r['budget']:>7.0f} {'yes' if r['fits'] else 'no':>4}"
              f"{r['estimate']:>9.0f}{r['registers']:>6}{r['spills']:>7}")
    wrong = [r for r in found if r["fits"] and r["spills"]]
    if args.padded:     # the estimate decides there (every tiling is within the budget)
        wrong = [r for r in found if r["estimate"] <= 255 and r["spills"]]
        print(f"estimate within 255 and spilled: {len(wrong)}; over it and not spilled: "
              f"{sum(1 for r in found if r['estimate'] > 255 and not r['spills'])}")
    print(f"{len(found)} kernels; within the budget and spilled: {len(wrong)}; "
          f"outside it and not spilled: {sum(1 for r in found if not r['fits'] and not r['spills'])}")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(found, f, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
