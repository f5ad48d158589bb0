"""Robustness run: every fuzzer of tests/fuzz/ for N minutes, then its figures.

    python benchmarks/fuzz.py --minutes 60 [--jobs 2] [--json figures.json]

Fixed parts first (about two minutes: the whole injection corpus through every field,
the ten seeded code generation bugs, the numeric edge cases of softmax and attention,
index widths at 2^31, huge front-end inputs), then, until the time is up, batches of random
well-typed diagrams and random legal plans (interpreted and emulated), random schedule
hints, random matrix products and attention forced onto tensor cores and random front-end input, spread over --jobs processes. A failure shrinks (Hypothesis) and
is saved under tests/regressions/. No GPU needed.

Every kind is started once before any kind runs twice (past the deadline if need be), and
then the kind furthest below its share of the time gets the next worker, counting the time
of batches still running (on a loaded machine long emulated batches had otherwise kept
looking starved and taken every worker: four kinds ran no example in 25 minutes). A kind
that still ran no example fails the run (exit status 1). A huge input that ends in a clean error but slowly is counted as
slow, not as an escape.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# batch kind -> (share of the remaining time, examples per batch); every share is at least
# MIN_SHARE
BATCHES = {
    "diagrams (emulated)": (0.40, 20),
    "tensor cores: products and attention (emulated)": (0.05, 10),
    "diagrams (interpreted)": (0.20, 100),
    "plans (emulated)": (0.15, 8),
    "plans (interpreted)": (0.05, 30),
    "hints (interpreted, some emulated)": (0.05, 40),
    "front end (grammar, text, bytes)": (0.10, 500),
}
MIN_SHARE = 0.05


def next_kind(used: dict[str, float], started: dict[str, int]) -> str:
    """The kind to give the next worker: one never started yet, else the one furthest below
    its share of `used` (seconds, running batches included)."""
    never = [k for k in BATCHES if not started.get(k)]
    if never:
        return never[0]
    total = sum(used.values()) or 1.0
    return min(BATCHES, key=lambda k: used.get(k, 0.0) / total - max(BATCHES[k][0], MIN_SHARE))


def starved(random: dict) -> list[str]:
    """The kinds that ran no example (a run with any of them is not a run of every fuzzer)."""
    return [k for k, v in random.items() if not v["tried"]]


# --- batches (run in worker processes) -----------------------------------------------------

def run_batch(kind: str, seed: int, examples: int) -> dict:
    """Run one Hypothesis batch; returns examples tried and failures by class."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed
    from hypothesis import strategies as st

    from napkin.diagrams.sources import library_names
    from tests.fuzz import frontend, gen, harness, plans

    tried = [0]
    splits = [0]            # random plans with a reduced axis split across blocks
    tails = [0]             # of those, default plans merging in the last blocks
    failures: list = []
    shrinking = [False]

    def note(failure_kind: str, message: str, case_text: str) -> None:
        if not shrinking[0]:
            failures.append((failure_kind, message[:300], case_text[:2000]))
            shrinking[0] = True

    if kind.startswith("diagrams"):
        strategy, emulate = gen.diagrams(), kind.endswith("(emulated)")
        recorder = harness.Recorder()

        def body(case):
            if not shrinking[0]:
                tried[0] += 1
            try:
                recorder.check(case, emulate=emulate, splits=True)
            except harness.Checked as exc:
                note(exc.failure.kind, str(exc.failure), case.describe())
                raise
        save = recorder.save
    elif kind.startswith("plans"):
        strategy, emulate = plans.planned(library_names()), kind.endswith("(emulated)")
        last: list = []

        def body(case):
            if not shrinking[0]:
                tried[0] += 1
                splits[0] += case[2].split is not None
                tails[0] += case[3].tail is not None
            try:
                plans.check_plan(case, emulate=emulate, tails=True)
            except harness.Checked as exc:
                last[:] = [case, exc.failure]
                note(exc.failure.kind, str(exc.failure), plans.describe(case))
                raise

        def save():
            if last:
                case, options = plans.as_regression(last[0])
                return harness.save_regression(case, last[1], **options)
            return None
    elif kind.startswith("tensor cores"):
        from tests.fuzz import products
        strategy = st.one_of(products.products().map(lambda c: (products.check, c)),
                             products.attentions().map(lambda c: (products.check_attention, c)))

        def body(item):
            check, case = item
            if not shrinking[0]:
                tried[0] += 1
            try:
                check(case)
            except Exception as exc:   # a mismatch or a crash of the lowering: both failures
                note("compare" if isinstance(exc, AssertionError) else "run", str(exc), case[0])
                raise
        save = lambda: None   # noqa: E731 - the failing text, sizes and tiling are in the report
    elif kind.startswith("hints"):
        from tests.fuzz.hints import check_hinted, hinted
        strategy = st.tuples(hinted(), st.integers(0, 9))

        def body(item):
            case, coin = item
            if not shrinking[0]:
                tried[0] += 1
            try:
                check_hinted(case, emulate=coin == 0)      # one in ten also emulated
            except harness.Checked as exc:
                note(exc.failure.kind, str(exc.failure), case[1])
                raise
        save = lambda: None   # noqa: E731 - the failing text is in the report
    else:
        strategy = st.one_of(frontend.grammar_statements().map(lambda s: ("grammar", s)),
                             frontend.SOUP.map(lambda s: ("soup", s)),
                             frontend.TEXT.map(lambda s: ("text", s)),
                             frontend.BYTES.map(lambda s: ("bytes", s)))

        def body(item):
            what, data = item
            if not shrinking[0]:
                tried[0] += 1
            problem = frontend.escape(frontend.PREAMBLE + data if what == "grammar" else data)
            if what == "grammar" and problem is None:
                problem = frontend.syntax_error(data)
            if problem:
                note("escape", problem, repr(data)[:2000])
                raise AssertionError(problem)
        save = lambda: None   # noqa: E731

    test = settings(max_examples=examples, deadline=None, database=None,
                    phases=[Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))(given(strategy)(body))
    test = with_seed(seed)(test)
    saved = None
    try:
        test()
    except Exception:  # noqa: BLE001 - the failure is recorded; keep the shrunk case
        saved = save()
    return {"kind": kind, "tried": tried[0], "splits": splits[0], "tails": tails[0],
            "failures": failures,
            "saved": str(saved) if saved else None}


# --- fixed parts ---------------------------------------------------------------------------

def injection() -> dict:
    from tests.fuzz.injection import FIELDS, attack
    from tests.fuzz.payloads import corpus
    payloads = corpus()
    outcomes = attack(payloads)
    return {"payloads": len(payloads), "fields": len(FIELDS), "cases": len(outcomes),
            "rejected": sum(o.rejected for o in outcomes),
            "accepted": sum(not o.rejected for o in outcomes),
            "leaks": sum(bool(o.problem) for o in outcomes),
            "examples": [f"{o.field}: {o.problem}" for o in outcomes if o.problem][:10]}


def mutation() -> dict:
    from tests.fuzz.mutants import MUTANTS, SUITE, run_check, score
    base = {c.name: run_check(c) for c in SUITE}
    rows = {m.name: score(m)[0] for m in MUTANTS}
    return {"suite passes unmutated": all(v == "" for v in base.values()),
            "caught": sum(v != "not caught" for v in rows.values()), "mutants": len(rows),
            "by mutant": rows}


def edge_cases() -> dict:
    from napkin.compiler.cost import Choice
    from tests.fuzz import edges
    passed = failed = 0
    notes = []
    for dtype in ("f32", "f16", "bf16"):
        runs = []
        for cols in (37, 1):
            inputs = edges.softmax_inputs(cols, dtype)
            streamed = Choice((("r", 3),), ("c", 8), (("r", 1),), ("c", 4)) if cols > 1 else None
            runs.append((edges.diagram(edges.SOFTMAX, dtype), inputs,
                         {"r": inputs["X"].shape[0], "c": cols}, streamed,
                         lambda out, c=cols: edges.softmax_expectations(out, c)))
        for nq, nx in ((6, 23), (4, 1)):
            inputs = edges.attention_inputs(nq, nx, dtype)
            streamed = Choice((("b", 1), ("q", 2)), ("x", 4), (("q", 1),), ("x", 2)) \
                if nx > 1 else None
            runs.append((edges.diagram(edges.ATTENTION, dtype), inputs, {"b": 1, "q": nq, "x": nx},
                         streamed, lambda out, i=inputs, q=nq, x=nx:
                         edges.attention_expectations(out, i, q, x)))
        for d, inputs, shape, streamed, expect in runs:
            try:
                results = edges.run_all(d, inputs, shape, streamed)
            except AssertionError as exc:
                failed += 1
                notes.append(f"{d.name} {dtype} {shape}: {exc}")
                continue
            for name, out in results.items():
                try:
                    expect(out)
                    passed += 1
                except AssertionError as exc:
                    failed += 1
                    notes.append(f"{d.name} {dtype} {shape} {name}: {exc}")
    return {"passed": passed, "failed": failed, "notes": notes[:10],
            "what": "(diagram, dtype, shape, backend) runs; each checks every scenario row"}


def index_width() -> dict:
    import napkin
    from tests.fuzz.test_index_width import CASES, problems_of
    problems = []
    for text, shape in CASES:
        found, _ = problems_of(napkin.load(text), shape)
        problems += found
    return {"cases": len(CASES), "overflows": len(problems), "examples": problems[:5]}


def huge_inputs() -> dict:
    from tests.fuzz.frontend import TIME_BOUND_S, huge_inputs as inputs, timed_escape
    escapes, slow, slowest = [], [], ("", 0.0)
    cases = inputs()
    for name, data in cases.items():
        found, seconds = timed_escape(data)
        if found:
            escapes.append(f"{name}: {found}")
        elif seconds > TIME_BOUND_S:                 # a clean error, but slow: not an escape
            slow.append(f"{name}: {seconds:.1f} s")
        slowest = max(slowest, (name, seconds), key=lambda x: x[1])
    return {"cases": len(cases), "escapes": len(escapes), "slow": len(slow),
            "examples": escapes + slow, "slowest": f"{slowest[0]} ({slowest[1]:.2f} s)"}


# --- the run -------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_path", default=None, help="also write the figures here")
    args = ap.parse_args()
    start = time.time()
    deadline = start + args.minutes * 60
    figures: dict = {"command": " ".join(["python", "benchmarks/fuzz.py"] + sys.argv[1:])}
    for name, fn in (("injection", injection), ("mutation", mutation),
                     ("numeric edge cases", edge_cases), ("index width", index_width),
                     ("huge front-end inputs", huge_inputs)):
        t0 = time.time()
        figures[name] = fn()
        figures[name]["seconds"] = round(time.time() - t0, 1)
        print(f"{name}: {json.dumps(figures[name], default=str)}", flush=True)
    deadline = max(deadline, time.time() + 30)      # the random part runs at least 30 s
    totals = {k: 0 for k in BATCHES}
    split_totals = {k: 0 for k in BATCHES}
    tail_totals = {k: 0 for k in BATCHES}
    classes = {k: collections.Counter() for k in BATCHES}
    examples, saved = [], []
    spent = {k: 0.0 for k in BATCHES}
    started = {k: 0 for k in BATCHES}
    counter = 0

    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        running = {}
        while True:
            while len(running) < args.jobs and (time.time() < deadline or not all(started.values())):
                now = time.time()
                used = dict(spent)
                for k, began in running.values():
                    used[k] += now - began
                kind = next_kind(used, started)
                counter += 1
                started[kind] += 1
                fut = pool.submit(run_batch, kind, args.seed * 1_000_003 + counter,
                                  BATCHES[kind][1])
                running[fut] = (kind, now)
            if not running:
                break
            done, _ = wait(running, timeout=30, return_when=FIRST_COMPLETED)
            for fut in done:
                kind, began = running.pop(fut)
                spent[kind] += time.time() - began
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - a crashed batch is a failure, not the end
                    result = {"tried": 0, "failures": [("batch crashed", repr(exc)[:300], "")],
                              "saved": None}
                totals[kind] += result["tried"]
                split_totals[kind] += result.get("splits", 0)
                tail_totals[kind] += result.get("tails", 0)
                for fkind, message, case in result["failures"]:
                    classes[kind][fkind] += 1
                    examples.append(f"[{kind}] {message}\n{case}")
                if result["saved"]:
                    saved.append(result["saved"])
    figures["random"] = {k: {"tried": totals[k], "failures": dict(classes[k]),
                             "minutes": round(spent[k] / 60, 1),
                             **({"split plans": split_totals[k],
                                 "last-block merges": tail_totals[k]}
                                if k.startswith("plans") else {})}
                         for k in BATCHES}
    figures["saved regressions"] = saved
    figures["failure examples"] = examples[:10]
    figures["minutes"] = round((time.time() - start) / 60, 1)
    figures["kinds without an example"] = starved(figures["random"])
    report(figures)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    if figures["kinds without an example"]:
        raise SystemExit(1)


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
        by = {k: x["failures"].get(k, 0) for k in ("compile", "run", "compare")}
        print(f"random plans {name}: {x['tried']} ({x.get('split plans', 0)} with a split "
              f"across blocks, {x.get('last-block merges', 0)} of whose default plans merge "
              f"in the last blocks), failures by class {by}")
    by = {k: hi["failures"].get(k, 0) for k in ("load", "compile", "run", "compare")}
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
    print(f"saved regressions: {f['saved regressions'] or 'none'}")
    print(f"total: {f['minutes']} min; reproduce with: {f['command']}")
    for kind in starved(r):
        print(f"FAILED: {kind} ran no example in this run: its figures above are not a result",
              file=sys.stderr)


if __name__ == "__main__":
    main()
