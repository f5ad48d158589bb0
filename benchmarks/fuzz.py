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

Time limits, so that a slow case is named and the run ends within its budget plus a bounded
margin (at most --case-seconds twice, --shrink-seconds and a minute): each random case runs
under --case-seconds (120; tests/fuzz/timeouts.py); one past it is a failure of class
"timeout", reported with the stage it was in (plan, lower, interpret, emulate, ...) and, for
diagrams and plans, saved under tests/regressions/ with that limit (test_regressions.py
runs it under the limit again); its batch stops there. A failure's shrinking stops after
--shrink-seconds (60; Hypothesis's own cap is five minutes) and saves the smallest failing
case so far. A batch starts no example past the run's deadline once it has tried one. A
batch still running at the margin's end (stuck where no signal reaches it) has its
worker processes killed and is reported as hung, with its kind and seed.
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

from tests.fuzz.fixed import edge_cases, huge_inputs, index_width, injection, mutation  # noqa: E402
from tests.fuzz.report import report, starved  # noqa: E402  (the run's figures)

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
CASE_SECONDS = 120.0      # one random case (tests/fuzz/timeouts.py; a loaded machine runs
                          # a 12 s case past 60 s)
SHRINK_SECONDS = 60.0     # shrinking one failure
HUNG_MARGIN = 60.0        # past the other limits: the batch's worker is killed


class Stop(BaseException):
    """Ends a batch's Hypothesis run at once (not a failure to shrink: Hypothesis lets a
    BaseException through, and so does the harness's `except Exception`)."""


def batch_margin(case_seconds: float, shrink_seconds: float) -> float:
    """Seconds past its `stop_at` (the run's deadline, or its start for a kind's first batch
    past it) that a batch may still run before it is taken as hung: an example in flight at
    the deadline, a shrink, a shrunk example in flight at its end, and HUNG_MARGIN."""
    return 2 * case_seconds + shrink_seconds + HUNG_MARGIN


def next_kind(used: dict[str, float], started: dict[str, int]) -> str:
    """The kind to give the next worker: one never started yet, else the one furthest below
    its share of `used` (seconds, running batches included)."""
    never = [k for k in BATCHES if not started.get(k)]
    if never:
        return never[0]
    total = sum(used.values()) or 1.0
    return min(BATCHES, key=lambda k: used.get(k, 0.0) / total - max(BATCHES[k][0], MIN_SHARE))


def run_batch(kind: str, seed: int, examples: int, *, case_seconds: float | None = None,
              shrink_seconds: float | None = None, stop_at: float | None = None) -> dict:
    """Run one Hypothesis batch; returns examples tried, failures by class and the slow
    cases (each case under `case_seconds`, a failure's shrinking under `shrink_seconds`, no
    example started past `stop_at` once one was tried; None: no limit)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed
    from hypothesis import strategies as st

    from napkin.diagrams.sources import library_names
    from tests.fuzz import frontend, gen, harness, plans, timeouts

    tried = [0]
    splits = [0]            # random plans with a reduced axis split across blocks
    tails = [0]             # of those, default plans merging in the last blocks
    alone = [0]             # of those, splits of some kernels alone (compiler/named_split.py)
    failures: list = []
    shrinking = [False]
    shrink_until = [None]
    slow: list = []         # (stage, case text, saved path or None)
    emulate = True          # (the diagrams and plans kinds say)

    def note(failure_kind: str, message: str, case_text: str) -> None:
        if not shrinking[0]:
            failures.append((failure_kind, message[:300], case_text[:2000]))
            shrinking[0] = True
            if shrink_seconds:
                shrink_until[0] = time.time() + shrink_seconds

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
        describe = lambda case: case.describe()                      # noqa: E731
        saved_as = lambda case: (case, recorder.drawn(case))         # noqa: E731
    elif kind.startswith("plans"):
        strategy, emulate = plans.planned(library_names()), kind.endswith("(emulated)")
        last: list = []

        def body(case):
            if not shrinking[0]:
                tried[0] += 1
                splits[0] += case[2].split is not None
                tails[0] += bool(case[3].tails)
                alone[0] += case[2].split is not None and case[2].split.alone is not None
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
        describe, saved_as = plans.describe, plans.as_regression
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
        describe, saved_as = (lambda item: item[1][0]), None           # noqa: E731
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
        describe, saved_as = (lambda item: item[0][1]), None           # noqa: E731
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
        describe, saved_as = (lambda item: repr(item[1])), None        # noqa: E731

    checked = body

    def body(item):
        """`checked` under the batch's limits: a slow case is noted, saved and ends the batch."""
        now = time.time()
        if shrinking[0] and shrink_until[0] is not None and now > shrink_until[0]:
            raise Stop("shrink budget spent")
        if not shrinking[0] and stop_at is not None and tried[0] and now > stop_at:
            raise Stop("the run's deadline")
        try:
            with timeouts.limit(case_seconds):
                checked(item)
        except timeouts.CaseTimeout as exc:
            where = timeouts.stage(exc)
            failure = harness.Failure("timeout", where, f"{exc} in {where}")
            path = None
            if saved_as is not None:      # (rerun as the batch ran it: interpreted only)
                case, options = saved_as(item)
                path = harness.save_regression(case, failure, time_limit=case_seconds,
                                               **options, **({} if emulate else
                                                             {"emulate": False}))
            text = describe(item)
            slow.append((where, text[:2000], str(path) if path else None))
            if not shrinking[0]:
                failures.append(("timeout", str(failure)[:300], text[:2000]))
            raise Stop("a slow case") from None

    test = settings(max_examples=examples, deadline=None, database=None,
                    phases=[Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))(given(strategy)(body))
    test = with_seed(seed)(test)
    saved = None
    try:
        test()
    except (Exception, Stop):  # noqa: BLE001 - the failure is recorded; keep the shrunk case
        saved = save() if shrinking[0] else None
    return {"kind": kind, "tried": tried[0], "splits": splits[0], "tails": tails[0],
            "alone": alone[0],
            "failures": failures, "slow": slow,
            "saved": str(saved) if saved else None}


# --- the run -------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_path", default=None, help="also write the figures here")
    ap.add_argument("--case-seconds", type=float, default=CASE_SECONDS,
                    help="time limit of one random case (a slower one is saved and reported)")
    ap.add_argument("--shrink-seconds", type=float, default=SHRINK_SECONDS,
                    help="time limit of shrinking one failure")
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
    alone_totals = {k: 0 for k in BATCHES}
    classes = {k: collections.Counter() for k in BATCHES}
    examples, saved = [], []
    spent = {k: 0.0 for k in BATCHES}
    started = {k: 0 for k in BATCHES}
    counter = 0

    slow: list = []
    margin = batch_margin(args.case_seconds, args.shrink_seconds)
    pool = ProcessPoolExecutor(max_workers=args.jobs)
    running = {}
    try:
        while True:
            while len(running) < args.jobs and (time.time() < deadline or not all(started.values())):
                now = time.time()
                used = dict(spent)
                for k, began, _, _ in running.values():
                    used[k] += now - began
                kind = next_kind(used, started)
                counter += 1
                started[kind] += 1
                seed = args.seed * 1_000_003 + counter
                stop_at = max(deadline, now)
                fut = pool.submit(run_batch, kind, seed, BATCHES[kind][1],
                                  case_seconds=args.case_seconds,
                                  shrink_seconds=args.shrink_seconds, stop_at=stop_at)
                running[fut] = (kind, now, seed, stop_at + margin)
            if not running:
                break
            done, _ = wait(running, timeout=30, return_when=FIRST_COMPLETED)
            results = []
            for fut in done:
                kind, began, seed, _ = running.pop(fut)
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - a crashed batch is a failure, not the end
                    result = {"tried": 0, "failures": [("batch crashed", repr(exc)[:300], "")],
                              "saved": None}
                results.append((kind, began, result))
            if any(time.time() > hung_at for *_, hung_at in running.values()):
                # stuck where the case's alarm does not reach (in C, or in a child without a
                # timeout): the pool's workers are killed and its batches reported as hung
                for kind, began, seed, hung_at in running.values():
                    what = "batch hung" if time.time() > hung_at else "batch lost"
                    results.append((kind, began, {"tried": 0, "saved": None, "failures": [(
                        what, f"batch seed {seed} still running {time.time() - began:.0f} s "
                        "after it began: its worker was killed", "")]}))
                    if what == "batch hung":
                        slow.append({"kind": kind, "stage": f"hung batch (seed {seed})",
                                     "case": "", "saved": None})
                kill(pool)
                running = {}
                pool = ProcessPoolExecutor(max_workers=args.jobs)
            for kind, began, result in results:
                spent[kind] += time.time() - began
                totals[kind] += result["tried"]
                split_totals[kind] += result.get("splits", 0)
                tail_totals[kind] += result.get("tails", 0)
                alone_totals[kind] += result.get("alone", 0)
                for fkind, message, case in result["failures"]:
                    classes[kind][fkind] += 1
                    examples.append(f"[{kind}] {message}\n{case}")
                for stage, case, path in result.get("slow", ()):
                    slow.append({"kind": kind, "stage": stage, "case": case, "saved": path})
                    print(f"slow case [{kind}] past {args.case_seconds:g} s in {stage}"
                          f"{'; saved as ' + path if path else ''}\n{case}", flush=True)
                    if path:
                        saved.append(path)
                if result["saved"]:
                    saved.append(result["saved"])
    finally:
        if running:
            kill(pool)
        else:
            pool.shutdown()
    figures["random"] = {k: {"tried": totals[k], "failures": dict(classes[k]),
                             "minutes": round(spent[k] / 60, 1),
                             **({"split plans": split_totals[k],
                                 "last-block merges": tail_totals[k],
                                 "splits of kernels alone": alone_totals[k]}
                                if k.startswith("plans") else {})}
                         for k in BATCHES}
    figures["saved regressions"] = saved
    figures["slow cases"] = slow
    figures["failure examples"] = examples[:10]
    figures["minutes"] = round((time.time() - start) / 60, 1)
    figures["kinds without an example"] = starved(figures["random"])
    report(figures)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(figures, indent=2, default=str) + "\n")
    if figures["kinds without an example"]:
        raise SystemExit(1)


def kill(pool: ProcessPoolExecutor) -> None:
    """End a pool whose worker is stuck: its processes are killed (by their ids), then the
    pool is shut down without waiting for them."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


if __name__ == "__main__":
    main()
