"""ptxas's registers for chains of products (compiler/chain.py) beside occupancy.py's estimate.

    python benchmarks/chain_registers.py [--json FILE] [--quick]

The data the chain's register estimate is fitted to (occupancy.CHAIN_HIGH and the constants
beside it, chain.MAX_REGISTERS and MASKED_MAX_REGISTERS): the gradients of attention,
causal attention and GQA (plain and with saved statistics; d 64 and 128; b=4, h=16,
q=x=2048), each planned on h100 with every chunk hint (16, 32, 64) on `q` and on `x` and
with the chain's fragment cap set, in turn, to each of several values up to 388, so that
tilings beyond what the planner takes are compiled too (the cap is this script's, restored
after each plan). Every chain kernel is compiled by NVRTC for sm_90 (needs the NVRTC
wheel, no GPU) and printed with its fragment values, the chunk's elementwise ops, its
chunk, ptxas's registers and spills, and the estimate; the summary gives the estimate's
rms error and bias over the unspilled kernels, and the largest fragment count ptxas held
without spills, with and without a mask's ops. Static figures: nothing here runs a kernel.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import numpy as np

CAPS = (52, 68, 84, 100, 132, 148, 164, 196, 388)


def rows(quick: bool = False) -> list[dict]:
    import napkin
    from napkin import pipeline
    from napkin.compiler import chain, occupancy
    from napkin.compiler.plan import plan
    opts = pipeline.Options.make(target="h100")
    names = ("attention", "causal_attention") if quick else \
        ("attention", "causal_attention", "gqa_attention")
    out, seen = [], set()
    kept = chain.MAX_REGISTERS, chain.MASKED_MAX_REGISTERS
    try:
        for name, saved, d in itertools.product(names, (False,) if quick else (False, True),
                                                (64, 128)):
            dg = napkin.grad(name, saved=saved, d=d)
            axes = dg.ir.graph["axes"]
            shape = {a: 2048 if a in ("q", "x") else 4 if a == "b" else 16
                     for a in {i.rep for i in axes.values() if i.size is None}}
            for chunk, ax, cap in itertools.product((16, 32, 64), ("q", "x"),
                                                    CAPS[::3] if quick else CAPS):
                chain.MAX_REGISTERS = chain.MASKED_MAX_REGISTERS = cap
                try:
                    p = plan(dg, "h100", shape, overrides={"stream": {ax: chunk}})
                except napkin.NapkinError:
                    continue
                chains = {kp.kernel.name: kp for kp in p.kernels
                          if kp.schedule.engine == "chain of products"
                          and kp.choice.stream[0] == ax}
                if not chains:
                    continue
                made = pipeline.through(p, "plan", "binary", opts)
                for kk in made["program"].kernels:
                    kp = chains.get(kk.kernel)
                    if kp is None:
                        continue
                    key = (name, d, kp.choice.thread, kp.choice.warps, kp.choice.stream,
                           kp.kernel.nodes)
                    if key in seen:
                        continue
                    seen.add(key)
                    r = made["binary"].resources[kk.name]
                    out.append({
                        "case": f"grad {name}{' saved' if saved else ''} d={d}",
                        "kernel": kp.kernel.name, "warps": kp.choice.warps[0][1],
                        "rows": max(t for _, t in kp.choice.thread), "chunk": kp.choice.stream[1],
                        "values": float(occupancy.fragment_values(kp.model, kp.choice, p.sizes)),
                        "ops": occupancy.score_ops(kp.model, kp.choice),
                        "ptxas": r["registers"], "spills": r["spill_stores"] + r["spill_loads"],
                        "estimate": round(float(kp.cost.registers), 1)})
                    print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    finally:
        chain.MAX_REGISTERS, chain.MASKED_MAX_REGISTERS = kept
    return out


def summary(table: list[dict]) -> str:
    from napkin.compiler import occupancy
    ok = [r for r in table if not r["spills"] and r["ptxas"] < 255]
    err = np.array([r["estimate"] - r["ptxas"] for r in ok])
    lines = [f"{len(table)} chain kernels, {len(ok)} unspilled below 255 registers"]
    if len(ok):
        lines.append(f"estimate - ptxas over those: rms {np.sqrt((err ** 2).mean()):.1f}, "
                     f"bias {err.mean():+.1f}, max |error| {np.abs(err).max():.1f}")
    for masked in (False, True):
        mine = [r for r in table if (r["ops"] > occupancy.CHAIN_OPS) == masked]
        held = [r["values"] for r in mine if not r["spills"]]
        spilled = [r["values"] for r in mine if r["spills"]]
        lines.append(f"{'with' if masked else 'without'} a mask's ops: largest fragment count "
                     f"held without spills {max(held, default=0):.0f}, smallest spilled "
                     f"{min(spilled, default=float('nan')):.0f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the table here")
    ap.add_argument("--quick", action="store_true", help="fewer diagrams and caps")
    args = ap.parse_args()
    table = rows(args.quick)
    print(f"{'case':32} {'kernel':6} {'warps':>5} {'rows':>4} {'chunk':>5} {'values':>6} "
          f"{'ops':>3} {'ptxas':>5} {'spills':>6} {'estimate':>8}")
    for r in sorted(table, key=lambda r: (r["values"], r["ops"], r["chunk"])):
        print(f"{r['case']:32} {r['kernel']:6} {r['warps']:5d} {r['rows']:4d} {r['chunk']:5d} "
              f"{r['values']:6.0f} {r['ops']:3d} {r['ptxas']:5d} {r['spills']:6d} "
              f"{r['estimate']:8.1f}")
    print(summary(table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
