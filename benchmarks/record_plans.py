"""Record (or check) every library plan's decisions and predicted times.

    python benchmarks/record_plans.py            # compare with the recording
    python benchmarks/record_plans.py --write    # record anew

For every library diagram, on two-level, a100, h100, h200 and hopper-toy, at the
default sizes, at every dynamic axis 4096 and at small odd sizes (77 and 130,
alternating over the dynamic axes), it records each kernel's `Choice` and
predicted `cost.time` through `plan.plan`. A change to the cost model's code or
to the searches that is meant to leave plans alone must keep the choices
identical and the times within 1e-9 relative (tests/compiler/test_cost_model.py
checks a part of the recording). Re-record when a diagram, fusion or the model
changes on purpose, and say so in the commit.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import napkin
from napkin.compiler import target as targets
from napkin.compiler.cost import Choice
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names

RECORDING = Path(__file__).resolve().parents[1] / "tests" / "compiler" / "data" / "plans.json"
TARGETS = ("two-level", "a100", "h100", "h200", "hopper-toy")
RELATIVE = 1e-9


def shapes(diagram) -> dict[str, dict]:
    """The three planning shapes of a diagram: default, large, small (by size class)."""
    axes = diagram.ir.graph["axes"]
    reps = sorted({info.rep for info in axes.values() if info.size is None})
    return {"default": {}, "large": {a: 4096 for a in reps},
            "small": {a: (77, 130)[i % 2] for i, a in enumerate(reps)}}


def choice_json(choice: Choice) -> dict:
    return {"group": [list(p) for p in choice.group],
            "stream": list(choice.stream) if choice.stream else None,
            "thread": [list(p) for p in choice.thread],
            "split": list(choice.split) if choice.split else None,
            "inner": list(choice.inner) if choice.inner else None,
            "warps": [list(p) for p in choice.warps],
            # attention's Q re-read from shared memory (recorded where chosen only)
            **({"reread": True} if choice.reread else {}),
            **({"instruction": choice.instruction} if choice.instruction != "mma.sync" else {})}


def record_one(name: str, tname: str, shape_name: str) -> list[dict]:
    """Each kernel's equations, those of them it recomputes, choice and predicted time."""
    d = napkin.load(name)
    p = plan(d, targets.load(tname), shapes(d)[shape_name])
    return [{"kernel": kp.kernel.name, "equations": list(kp.kernel.equations),
             "recomputed": list(kp.kernel.recomputed), "choice": choice_json(kp.choice),
             "time": float(kp.cost.time)}
            for kp in p.kernels]


def cases():
    for name in library_names():
        for tname in TARGETS:
            for shape_name in ("default", "large", "small"):
                yield name, tname, shape_name


def key(name: str, tname: str, shape_name: str) -> str:
    return f"{name} {tname} {shape_name}"


def record() -> dict:
    return {key(*c): record_one(*c) for c in cases()}


def differences(recorded: list[dict], now: list[dict]) -> list[str]:
    """What differs between two recordings of one plan (empty: the same plan)."""
    if len(recorded) != len(now):
        return [f"{len(recorded)} kernels recorded, {len(now)} now"]
    out = []
    for r, n in zip(recorded, now):
        for field in ("kernel", "equations", "recomputed", "choice"):
            if r[field] != n[field]:
                out.append(f"{r['kernel']}: {field} {r[field]} recorded, {n[field]} now")
        if not math.isclose(r["time"], n["time"], rel_tol=RELATIVE, abs_tol=0.0):
            out.append(f"{r['kernel']}: time {r['time']!r} recorded, {n['time']!r} now")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record anew instead of comparing")
    args = ap.parse_args()
    if args.write:
        RECORDING.parent.mkdir(parents=True, exist_ok=True)
        lines = [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                 for k, v in sorted(record().items())]
        RECORDING.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        print(f"recorded {RECORDING}")
        return 0
    recorded = json.loads(RECORDING.read_text())
    bad, kernels = 0, 0
    for c in cases():
        now = record_one(*c)
        kernels += len(now)
        diffs = differences(recorded[key(*c)], now)
        bad += bool(diffs)
        for line in diffs:
            print(f"{key(*c)}: {line}")
    print(f"{len(recorded)} plans, {kernels} kernels compared: "
          f"{'identical' if not bad else f'{bad} plans differ'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
