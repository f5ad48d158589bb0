"""benchmarks/fuzz.py keeps working: each kind of random batch runs and counts what it tried,
the fixed parts' cheap figures come out, and the report prints every figure the
reliability page quotes. (The long run itself is `python benchmarks/fuzz.py --minutes N`.)"""

from __future__ import annotations

import importlib.util
import sys
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
                   "{'compile': 0, 'run': 0, 'compare': 0}",
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
