"""Packed documents (varlen_attention) against causal attention over the documents one by one:
model figures, no GPU (issue 18: within 1.3x).

For each mix of document lengths packed into `--tokens` tokens, prints the planned fraction of
(block, chunk) pairs computed with the document ids given for planning, the predicted time of
the packed kernel, the sum of causal_attention's predicted times over the documents at their
own lengths (one launch each), and the ratio. Without the ids the model counts the document
comparison as holding anywhere; that figure is printed too.

    python benchmarks/varlen_check.py [--target h100] [--tokens 16384] [--heads 16]
"""

from __future__ import annotations

import argparse

import numpy as np

import napkin
from napkin.compiler.plan import plan


def mixes(tokens: int, seed: int = 0) -> dict[str, list[int]]:
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(0.0, 0.8, 16)
    mixed = np.maximum(1, np.round(raw / raw.sum() * tokens)).astype(int)
    mixed[-1] += tokens - mixed.sum()
    return {"16 equal": [tokens // 16] * 16,
            "16 mixed (lognormal)": mixed.tolist(),
            "1 long + 15 short": [tokens - 15 * 128] + [128] * 15}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="h100")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args(argv)
    d = napkin.load("varlen_attention")
    causal = napkin.load("causal_attention", d=64)
    shape = {"h": args.heads, "q": args.tokens, "x": args.tokens}
    print(f"varlen_attention, h={args.heads}, {args.tokens} tokens, d=64, {args.target} "
          "(model figures)")
    print(f"{'documents':24} {'computed':>9} {'packed us':>10} {'no ids us':>10} "
          f"{'one by one us':>14} {'ratio':>6}")
    for name, lengths in mixes(args.tokens).items():
        doc = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
        packed = plan(d, args.target, shape, data={"doc": doc})
        blind = plan(d, args.target, shape)
        alone = sum(plan(causal, args.target, {"b": 1, "h": args.heads, "q": n, "x": n}).time
                    for n in lengths)
        print(f"{name:24} {packed.kernels[0].cost.computed:9.3f} {packed.time * 1e6:10.1f} "
              f"{blind.time * 1e6:10.1f} {alone * 1e6:14.1f} {packed.time / alone:6.2f}")


if __name__ == "__main__":
    main()
