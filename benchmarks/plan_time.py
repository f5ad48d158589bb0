"""Planning time per library diagram and target (aim: under 100 ms each).

    python benchmarks/plan_time.py [--repeat 3] [--shape q=4096,x=4096]

Prints one line per (diagram, target): the best of --repeat runs of
canonicalise + fuse + tile search, the kernel count, and the predicted time.
No GPU needed.
"""

from __future__ import annotations

import argparse
import time

import napkin
from napkin.compiler import target as targets
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", default="", help="planning sizes for dynamic axes, e.g. q=4096")
    args = ap.parse_args()
    shape = {k: int(v) for k, v in (p.split("=") for p in args.shape.split(",") if p)}
    rows, worst = [], 0.0
    print(f"{'diagram':<18} {'target':<11} {'plan ms':>8} {'kernels':>8} {'predicted':>12}")
    for name in library_names():
        d = napkin.load(name)
        for tname in ("two-level", "a100", "h100", "h200", "hopper-toy"):
            tgt = targets.load(tname)
            best = float("inf")
            for _ in range(args.repeat):
                start = time.perf_counter()
                p = plan(d, tgt, shape)
                best = min(best, time.perf_counter() - start)
            worst = max(worst, best)
            rows.append(best)
            print(f"{name:<18} {tname:<11} {best * 1e3:8.1f} {len(p.kernels):8d} "
                  f"{p.time:12.4g}")
    print(f"\nmedian {sorted(rows)[len(rows) // 2] * 1e3:.1f} ms, worst {worst * 1e3:.1f} ms "
          f"(aim: under 100 ms each)")


if __name__ == "__main__":
    main()
