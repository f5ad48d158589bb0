"""benchmarks/fuzz.py's figures, printed at the end of a run (and by its tests)."""

from __future__ import annotations

import sys


def starved(random: dict) -> list[str]:
    """The kinds that ran no example (a run with any of them is not a run of every fuzzer)."""
    return [k for k, v in random.items() if not v["tried"]]


# --- batches (run in worker processes) -----------------------------------------------------


def report(f: dict) -> None:
    r = f["random"]
    d_em, d_in = r["diagrams (emulated)"], r["diagrams (interpreted)"]
    p_em, p_in = r["plans (emulated)"], r["plans (interpreted)"]
    fe = r["front end (grammar, text, bytes)"]
    hi = r["hints (interpreted, some emulated)"]
    tc = r["tensor cores: products and attention (emulated)"]
    inj, mut, edge = f["injection"], f["mutation"], f["numeric edge cases"]
    print("\n== figures ==")
    print(f"random diagrams emulated (and interpreted): {d_em['tried']}, mismatches "
          f"{sum(d_em['failures'].values())} {d_em['failures']}")
    print(f"random diagrams interpreted only: {d_in['tried']}, mismatches "
          f"{sum(d_in['failures'].values())} {d_in['failures']}")
    for name, x in (("emulated", p_em), ("interpreted", p_in)):
        by = {k: x["failures"].get(k, 0) for k in ("compile", "run", "compare", "timeout")}
        print(f"random plans {name}: {x['tried']} ({x.get('split plans', 0)} with a split "
              f"across blocks, {x.get('last-block merges', 0)} of whose default plans merge "
              f"in the last blocks), failures by class {by}")
    by = {k: hi["failures"].get(k, 0) for k in ("load", "compile", "run", "compare", "timeout")}
    print(f"random schedule hints: {hi['tried']}, failures by class {by}")
    print(f"random products and attention on tensor cores: {tc['tried']}, failures "
          f"{tc['failures']}")
    huge = f["huge front-end inputs"]
    print(f"front-end inputs: {fe['tried']} random + {huge['cases']} huge; non-NapkinError "
          f"escapes {sum(fe['failures'].values()) + huge['escapes']}; slow but clean "
          f"{huge['slow']}; slowest {huge['slowest']}")
    print(f"injection: {inj['payloads']} payloads x {inj['fields']} fields = {inj['cases']} cases "
          f"({inj['rejected']} clean errors, {inj['accepted']} compiled); leaks {inj['leaks']}")
    print(f"mutation score: {mut['caught']}/{mut['mutants']}")
    for m, why in mut["by mutant"].items():
        print(f"  {m}: {why[:110]}")
    print(f"numeric edge cases: {edge['passed']} passed, {edge['failed']} failed")
    iw = f["index width"]
    print(f"index width: {iw['cases']} cases at 2^31, overflows {iw['overflows']}")
    print(f"slow cases: {len(f.get('slow cases', ()))}"
          + "".join(f"\n  [{c['kind']}] {c['stage']}" + (f": saved as {c['saved']}"
                    if c["saved"] else "") for c in f.get("slow cases", ())))
    print(f"saved regressions: {f['saved regressions'] or 'none'}")
    print(f"total: {f['minutes']} min; reproduce with: {f['command']}")
    for kind in starved(r):
        print(f"FAILED: {kind} ran no example in this run: its figures above are not a result",
              file=sys.stderr)
