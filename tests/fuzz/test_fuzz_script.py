"""benchmarks/fuzz.py keeps working: each kind of random batch runs and counts what it tried,
the fixed parts' cheap figures come out, and the report prints every figure the
reliability page quotes. (The long run itself is `python benchmarks/fuzz.py --minutes N`.)"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fuzz():
    spec = importlib.util.spec_from_file_location("napkin_fuzz_script", ROOT / "benchmarks" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind, examples", [("diagrams (interpreted)", 5), ("diagrams (emulated)", 1),
                                            ("plans (interpreted)", 3),
                                            ("hints (interpreted, some emulated)", 4),
                                            ("tensor cores: products and attention (emulated)", 2),
                                            ("front end (grammar, text, bytes)", 30)])
def test_every_batch_kind_runs(fuzz, kind, examples):
    assert kind in fuzz.BATCHES
    result = fuzz.run_batch(kind, seed=11, examples=examples)
    assert result["kind"] == kind and result["failures"] == [] and result["saved"] is None
    assert result["tried"] == examples


def test_the_report_prints_every_figure(fuzz, capsys):
    figures = {"command": "python benchmarks/fuzz.py --minutes 1", "minutes": 1.0,
               "index width": fuzz.index_width(), "saved regressions": [], "failure examples": [],
               "injection": {"payloads": 3, "fields": 2, "cases": 6, "rejected": 4, "accepted": 2,
                             "leaks": 0},
               "mutation": {"caught": 9, "mutants": 10, "by mutant": {"dropped barrier": "caught"}},
               "numeric edge cases": {"passed": 48, "failed": 0},
               "huge front-end inputs": {"cases": 22, "escapes": 0, "slow": 1,
                                         "slowest": "x (21.00 s)"},
               "random": {k: {"tried": 7, "failures": {}, "minutes": 0.1,
                              **({"split plans": 3, "last-block merges": 2}
                                 if k.startswith("plans") else {})}
                          for k in fuzz.BATCHES}}
    assert figures["index width"]["overflows"] == 0
    fuzz.report(figures)
    out = capsys.readouterr().out
    for needle in ("random diagrams emulated (and interpreted): 7, mismatches 0",
                   "random plans emulated: 7 (3 with a split across blocks, 2 of whose default "
                   "plans merge in the last blocks), failures by class "
                   "{'compile': 0, 'run': 0, 'compare': 0, 'timeout': 0}",
                   "non-NapkinError escapes 0; slow but clean 1", "leaks 0",
                   "mutation score: 9/10",
                   "numeric edge cases: 48 passed, 0 failed",
                   "random schedule hints: 7, failures by class {'load': 0, 'compile': 0",
                   "random products and attention on tensor cores: 7, failures {}",
                   f"index width: {figures['index width']['cases']} cases at 2^31, overflows 0"):
        assert needle in out, out


def test_every_kind_starts_before_any_runs_twice_and_running_time_counts(fuzz):
    started, used, order = {}, {k: 0.0 for k in fuzz.BATCHES}, []
    for _ in fuzz.BATCHES:
        kind = fuzz.next_kind(used, started)
        started[kind] = started.get(kind, 0) + 1
        order.append(kind)
    assert sorted(order) == sorted(fuzz.BATCHES)
    assert all(share >= fuzz.MIN_SHARE for share, _ in fuzz.BATCHES.values())
    # a long emulated batch still running counts: the next worker goes to a starved kind
    used = {k: 60.0 for k in fuzz.BATCHES}
    used["diagrams (emulated)"] = 3000.0
    assert fuzz.next_kind(used, started) != "diagrams (emulated)"
    used = {k: 0.0 for k in fuzz.BATCHES}
    used["front end (grammar, text, bytes)"] = 100.0
    assert fuzz.next_kind(used, started) == "diagrams (emulated)"     # the largest share


def test_a_kind_without_an_example_fails_loudly(fuzz, capsys):
    random = {k: {"tried": 7, "failures": {}, "minutes": 0.1} for k in fuzz.BATCHES}
    random["plans (interpreted)"]["tried"] = 0
    assert fuzz.starved(random) == ["plans (interpreted)"]
    figures = {"command": "c", "minutes": 1.0, "index width": {"cases": 1, "overflows": 0},
               "saved regressions": [], "injection": {"payloads": 1, "fields": 1, "cases": 1,
                                                      "rejected": 1, "accepted": 0, "leaks": 0},
               "mutation": {"caught": 1, "mutants": 1, "by mutant": {}},
               "numeric edge cases": {"passed": 1, "failed": 0},
               "huge front-end inputs": {"cases": 1, "escapes": 0, "slow": 0, "slowest": "x"},
               "random": random}
    fuzz.report(figures)
    assert "FAILED: plans (interpreted) ran no example" in capsys.readouterr().err


def _slow_canonicalize(monkeypatch, seconds: float) -> None:
    """Planning made slow where a planner blow-up would be: compiler/plan.py's call of
    canonicalize sleeps first."""
    from napkin.compiler import plan as planner
    original = planner.canonicalize

    def slow(*args, **kw):
        time.sleep(seconds)
        return original(*args, **kw)
    monkeypatch.setattr(planner, "canonicalize", slow)


def test_a_slow_case_is_named_saved_and_ends_its_batch(fuzz, monkeypatch, tmp_path):
    """seed 46's run waited without end on one batch (no limit on a case or a shrink): past
    --case-seconds a case is a `timeout` failure with its stage, saved like a mismatch (with
    the limit: test_regressions.py reruns it under it), and its batch stops there."""
    from tests.fuzz import harness, timeouts
    monkeypatch.setattr(harness, "save_regression",
                        functools.partial(harness.save_regression, folder=tmp_path))
    _slow_canonicalize(monkeypatch, 20.0)
    began = time.time()
    result = fuzz.run_batch("diagrams (interpreted)", seed=11, examples=5, case_seconds=0.3)
    # (cut by the 0.3 s limit, not the 20 s sleep; the bound is loose for a loaded machine)
    assert time.time() - began < 15.0
    assert result["tried"] == 1 and result["saved"] is None
    [(stage, text, path)] = result["slow"]
    assert stage.startswith("plan (compiler/plan.py:")
    assert [f[0] for f in result["failures"]] == ["timeout"] and "axis " in text
    meta = json.loads(Path(path).with_suffix(".json").read_text())
    assert meta["time_limit"] == 0.3 and meta["failure"].startswith("timeout error (plan (")
    case, options = harness.load_regression(Path(path))
    assert options["emulate"] is False              # as its batch ran it: interpreted
    with pytest.raises(timeouts.CaseTimeout) as exc, timeouts.limit(0.3):
        harness.check_case(case, **options)
    assert timeouts.stage(exc.value) == stage
    monkeypatch.undo()                  # fixed: the saved case passes within its limit
    with timeouts.limit(meta["time_limit"] * 20):
        harness.check_case(case, **options)


def test_shrinking_stops_at_its_budget_and_keeps_the_case(fuzz, monkeypatch, tmp_path):
    """Every case fails, slowly: shrinking (up to five minutes in Hypothesis) stops after
    --shrink-seconds and the smallest failing case so far is saved."""
    from tests.fuzz import harness
    calls = []

    def failing(case, **kw):
        calls.append(case)
        time.sleep(0.1)
        raise harness.Checked(harness.Failure("compare", "emulate", "seeded"))
    monkeypatch.setattr(harness, "check_case", failing)
    monkeypatch.setattr(harness, "REGRESSIONS", tmp_path)
    monkeypatch.setattr(harness.Recorder, "save", functools.partialmethod(
        harness.Recorder.save, folder=tmp_path))
    result = fuzz.run_batch("diagrams (interpreted)", seed=11, examples=5, shrink_seconds=0.35)
    assert len(calls) <= 6 and result["saved"]
    assert Path(result["saved"]).read_text() == calls[-1].text


def test_a_hung_pools_workers_are_killed(fuzz):
    """The main process's backstop for a batch no signal reaches: its worker is killed."""
    from concurrent.futures import ProcessPoolExecutor
    pool = ProcessPoolExecutor(max_workers=1)
    fut = pool.submit(time.sleep, 600)
    time.sleep(0.5)
    [proc] = pool._processes.values()
    fuzz.kill(pool)
    proc.join(120)      # (generous: a loaded machine is slow to reap; a hung one never is)
    assert not proc.is_alive()
    # the pool's manager thread finds the dead worker and ends its future (asynchronously:
    # just after the join it may still read `running`)
    from concurrent.futures import wait
    wait([fut], timeout=120)
    assert fut.done()


def test_a_timeouts_stage_is_the_outermost_napkin_frames_past_the_driver():
    """The interpreter's frame calling a compiler helper (seed 46's slow case: the
    interpreter in compiler/accumulators.py) is `interpret`, placed at the helper."""
    from tests.fuzz import timeouts

    def frames(*paths):
        scope = {"CaseTimeout": timeouts.CaseTimeout}
        inner = "raise CaseTimeout(1)"
        for i, path in enumerate(reversed(paths)):
            code = f"def f{i}():\n    {inner}\n"
            exec(compile(code, str(timeouts.ROOT / path), "exec"), scope)
            inner = f"f{i}()"
        with pytest.raises(timeouts.CaseTimeout) as exc:
            eval(inner, scope)
        return timeouts.stage(exc.value)
    assert frames("api/pipeline.py", "runtime/interpret.py", "compiler/accumulators.py") == \
        "interpret (compiler/accumulators.py:2 in f0)"
    assert frames("api/pipeline.py", "compiler/plan.py").startswith("plan (compiler/plan.py:")
    assert frames("api/pipeline.py", "runtime/emulated.py", "runtime/emulate/process.py") \
        .startswith("emulate (runtime/emulate/process.py:")
    assert frames("api/pipeline.py").startswith("driver (")
    assert frames("tests/fuzz/harness.py") == "harness"


def test_a_drawn_split_names_an_axis_of_the_diagram():
    """`max[i j](...)` merges i and j into `(i*j)` in the canonical IR; the split drawn for a
    case named that (seed 505's two saved 'regressions', which plan refused at the hint with
    N0201: no axis a user may name). It is drawn among the diagram's axes, each kept as a hint
    keeps it, and plans."""
    from tests.fuzz.gen import Case
    from tests.fuzz.harness import drawn_split, load_case
    from napkin.compiler.plan import plan
    text = ("axis i = 2, j = 2, k = 2, l = 2\nin X0[i j k]: f32\n"
            "E0[l k]: f32 = maximum(max[i j](where((k < 0), X0, -inf)), (-8))\nout E0: f32\n")
    case = Case(text, {}, 0)
    split = drawn_split(case)
    assert split is not None and set(split) <= {"i", "j"}, split
    plan(load_case(case), "h100", {}, {"split": split})
