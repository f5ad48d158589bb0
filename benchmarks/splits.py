"""Split counts: the planner's choice beside FlashAttention-3's wave-efficiency rule (model figures).

    python benchmarks/splits.py [--target h200]

For decode attention (q = 1; 32 query heads on 8 key-value heads as gqa_attention, and
32 heads as attention; d = 128, f16; b in 1/8/32, keys x in 4k/32k/128k) and for batch-1
long attention, prints the split napkin's planner chooses (docs/splits.md) and its predicted
time, beside the split count FlashAttention-3's rule gives and napkin's predicted time with
that count forced (`split x by N`). The rule (as the issue states it): with B = the blocks
without a split (batch x key-value heads x query tiles of 64 rows), no split when B fills 80%
of the SMs; else the smallest count s (at most 128, the SMs, and the key tiles of 128) whose
wave efficiency n / ceil(n), n = B s / SMs, reaches 85% of the best. Every figure is the cost
model's (no GPU has run these kernels): it shows whether the planner's own pricing beats the
rule by the planner's own model, not that either is right.
"""

from __future__ import annotations

import argparse
import math


def fa3_rule(blocks: int, sms: int, key_tiles: int, most: int = 128) -> int:
    if blocks >= 0.8 * sms:
        return 1
    most = max(1, min(most, sms, key_tiles))
    eff = []
    for s in range(1, most + 1):
        waves = blocks * s / sms
        eff.append(waves / math.ceil(waves))
    best = max(eff)
    return next(s for s, e in enumerate(eff, start=1) if e >= 0.85 * best)


CASES = [("gqa_attention", {"b": b, "g": 8, "r": 4, "q": 1, "x": x}, 8 * b)
         for b in (1, 8, 32) for x in (4096, 32768, 131072)] + \
        [("attention", {"b": b, "h": 32, "q": 1, "x": 32768}, 32 * b) for b in (1, 8)] + \
        [("attention", {"b": 1, "h": 1, "q": 4096, "x": 4096}, 64),
         ("attention", {"b": 1, "h": 4, "q": 8192, "x": 8192}, 4 * 128)]


def main(argv=None) -> int:
    import napkin
    from napkin.compiler.plan import plan
    from napkin.compiler.target import load
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h200")
    args = ap.parse_args(argv)
    sms = load(args.target).processors
    print(f"model figures on {args.target} ({sms} SMs), d = 128, f16\n")
    print(f"{'diagram':<14} {'shape':<34} {'napkin':>16} {'us':>8}   {'FA3 rule':>9} {'us':>8}")
    for name, shape, blocks in CASES:
        d = napkin.load(name, d=128)
        mine = plan(d, args.target, shape)
        rule = fa3_rule(blocks * -(-shape["q"] // 64), sms, -(-shape["x"] // 128))
        theirs = plan(d, args.target, shape, {"split": {"x": rule}})   # 1: unsplit
        chosen = f"x by {mine.split.parts}" if mine.split else "unsplit"
        text = " ".join(f"{a}={v}" for a, v in shape.items())
        print(f"{name:<14} {text:<34} {chosen:>16} {mine.time * 1e6:>8.1f}   "
              f"{rule:>9} {theirs.time * 1e6:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
