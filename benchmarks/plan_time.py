"""Planning time per library diagram and target (aim: median under 20 ms, each under 100 ms).

    python benchmarks/plan_time.py [--repeat 3] [--shape q=4096,x=4096] [--clock cpu]

Prints one line per (diagram, target): the best of --repeat runs of
canonicalise + fuse + tile search, the kernel count, and the predicted time;
then the median, the worst and the three slowest. `--clock cpu` counts this
process's CPU time instead of wall time (on a shared machine the wall clock
also counts everyone else's work). No GPU needed.
"""

from __future__ import annotations

import argparse
import time

import napkin
from napkin.compiler import target as targets
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", default="", help="planning sizes for dynamic axes, e.g. q=4096")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = ap.parse_args()
    clock = CLOCKS[args.clock]
    shape = {k: int(v) for k, v in (p.split("=") for p in args.shape.split(",") if p)}
    rows = []
    print(f"{'diagram':<18} {'target':<11} {'plan ms':>8} {'kernels':>8} {'predicted':>12}")
    for name in library_names():
        d = napkin.load(name)
        for tname in ("two-level", "a100", "h100", "h200", "hopper-toy"):
            tgt = targets.load(tname)
            best = float("inf")
            for _ in range(args.repeat):
                start = clock()
                p = plan(d, tgt, shape)
                best = min(best, clock() - start)
            rows.append((best, name, tname))
            print(f"{name:<18} {tname:<11} {best * 1e3:8.1f} {len(p.kernels):8d} "
                  f"{p.time:12.4g}")
    rows.sort()
    slowest = ", ".join(f"{n} on {t} {s * 1e3:.1f}" for s, n, t in reversed(rows[-3:]))
    print(f"\nmedian {rows[len(rows) // 2][0] * 1e3:.1f} ms, worst {rows[-1][0] * 1e3:.1f} ms "
          f"(aim: median under 20 ms, each under 100 ms; {args.clock} clock)\n"
          f"slowest: {slowest}")


if __name__ == "__main__":
    main()
