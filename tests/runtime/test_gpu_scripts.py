"""Without a GPU: napkin bench exits 3; benchmarks/gpu_check.py --dry-run runs through."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from napkin.cli import main
from napkin.diagrams.sources import library_names

ROOT = Path(__file__).parents[2]


def _script(name: str):
    """benchmarks/<name>.py as a module."""
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"napkin_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_check():
    return _script("gpu_check")


def test_gpu_check_cases_cover_every_diagram_and_dtype():
    script = _gpu_check()
    cases = script.check_cases(library_names())
    assert len(cases) == 3 * len(library_names()) == len(set(cases))
    sample = script.check_cases(library_names(), sample=True)
    assert [n for n, _ in sample] == list(library_names()) and set(sample) <= set(cases)
    assert {t for _, t in sample} == {"f32", "f16", "bf16"}


def test_bench_without_a_gpu_exits_3(capsys):
    assert main(["bench", "attention", "--shape", "b=1,h=1,q=64,x=64"]) == 3
    assert "N0901" in capsys.readouterr().err


# The default run checks three library diagrams (one per dtype, --sample) and every other
# section; the thorough tier checks every library diagram too. Each library kernel's compile
# for f16 and f32 is also tests/codegen/test_compile_library's, its reference evaluation
# tests/codegen/test_emulated_library's: the dry run's checks of all of them cost 5 of its
# 11 CPU-s.
FEW = ("attention", "layernorm", "embedding")
# The new kernels' section (benchmarks/gpu_features.py): each case's NVRTC compile costs about
# a CPU-second, so the default run checks one feature, its first case (--sample: paged
# attention with packed rows and a split, on tensor cores) and times its first (--quick: the
# paged decode), +2.2 CPU-s; the thorough tier runs the first case of every feature here and
# every case in test_every_new_kernel_case_is_planned_on_its_path_and_compiled.
FEW_FEATURES = ("paged-tensor-cores",)


def _features_present(checks, timed) -> None:
    """Each case ran along the path it exists for (packed rows, Q re-read, the split, the
    engine), compiled without spills, at sizes the GPU's check launches unclamped."""
    for c in checks:
        assert c["status"] == "compiled" and c["path_ok"], c
        assert all(res["spill_stores"] == 0 for res in c["resources"].values()), c
        assert all(v <= 192 for v in c["shape"].values())      # bench.CHECK_LIMIT
    for t in timed:
        assert t["status"] == "planned" and t["path_ok"] and t["predicted_seconds"] > 0, t
        assert "attention" in t["engines"]
        assert all(res["spill_stores"] == 0 for res in t["resources"].values()), t


@pytest.mark.thorough
def test_every_new_kernel_case_is_planned_on_its_path_and_compiled():
    """All of gpu_features' checks (four features, f16 and bf16) and timings, as --dry-run
    runs them without --features, --sample or --quick."""
    script = _gpu_features()
    checks = list(script.feature_checks(True))
    timed = list(script.feature_timings(True, False))
    assert [c["case"] for c in checks] == [c[0] for c in script.CHECKS]
    assert {c["feature"] for c in checks} == {"packed-gqa", "wide-head", "softmax-3-axes",
                                              "paged-tensor-cores", "merged-axes",
                                              "stored-16-bit", "wgmma", "padded-head",
                                              "padded-rows"}
    assert {c["dtype"] for c in checks} == {"f16", "bf16"}
    assert [t["case"] for t in timed] == [t[0] for t in script.TIMINGS]
    _features_present(checks, timed)


def _gpu_features():
    return _script("gpu_features")


# (both thorough: the dry run of every section is ~20 CPU-s, a tenth of the default run's
# growth this session; test_gpu_check_cases_cover_every_diagram_and_dtype stays default)
@pytest.mark.parametrize("diagrams", [pytest.param(FEW, marks=pytest.mark.thorough),
                                      pytest.param(None, marks=pytest.mark.thorough)],
                         ids=["three-diagrams", "every-diagram"])
def test_gpu_check_dry_run(tmp_path, diagrams):
    # --sample: each diagram checked in one dtype, the dtypes in turn (all three here)
    few = ["--diagrams", ",".join(diagrams), "--features", ",".join(FEW_FEATURES)] \
        if diagrams else []
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run",
                           "--quick", "--sample", *few, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] is True and report["sample"] is True
    assert [c["diagram"] for c in report["checks"]] == \
        [n for n in library_names() if diagrams is None or n in diagrams]
    assert {c["dtype"] for c in report["checks"]} == {"f32", "f16", "bf16"}
    # the new kernels: the first case of each feature (--sample, --quick), compiled on its path
    script = _gpu_features()
    wanted = FEW_FEATURES if diagrams else None
    assert [c["case"] for c in report["features"]] == \
        [c[0] for c in script.firsts(script.chosen(script.CHECKS, wanted))]
    assert [t["case"] for t in report["timings"] if "case" in t] == \
        [t[0] for t in script.firsts(script.chosen(script.TIMINGS, wanted))]
    _features_present(report["features"], [t for t in report["timings"] if "case" in t])
    if diagrams:
        assert report["features"][0]["path"]["packed"] == ["r", "q"]
    assert report["estimated_device_seconds"] > report["seconds"]
    assert all(c["status"] == "compiled" for c in report["checks"]), \
        [c for c in report["checks"] if c["status"] != "compiled"][:1]
    for c in report["checks"]:
        for res in c["resources"].values():
            assert res["spill_stores"] == 0
    assert {t["diagram"] for t in report["timings"] if "case" not in t} == {"attention", "matmul"}
    # the backward, planned with dQ added across blocks by atomics and without (--quick: the
    # saved gradient at d=64)
    (bwd,) = report["backward"]
    assert bwd["status"] == "planned", bwd
    assert bwd["plans"]["atomics"]["added"] and not bwd["plans"]["apart"]["added"]
    assert bwd["plans"]["atomics"]["predicted_seconds"] < bwd["plans"]["apart"]["predicted_seconds"]
    assert all(t["status"] == "planned" and t["predicted_seconds"] > 0 for t in report["timings"])
    # decode attention (q = 1, 32 query heads on 8 key-value heads): planned with split keys
    (dec,) = report["decode"]
    assert dec["status"] == "planned" and dec["split"]["axis"] == "x", dec
    assert dec["predicted_seconds"] > dec["kv_bytes"] / dec["peak_bytes_per_second"]
    # the ranking check: the model's top candidates and the chosen plan, each lowered
    assert [r["diagram"] for r in report["ranking"]] == ["attention", "attention", "matmul"]
    for r in report["ranking"]:
        assert r["status"] == "planned", r
        times = [c["predicted_seconds"] for c in r["candidates"]]
        assert 8 <= len(times) <= 9 and sum(c["chosen"] for c in r["candidates"]) == 1
        assert times[:8] == sorted(times[:8]) and min(times) == next(
            c["predicted_seconds"] for c in r["candidates"] if c["chosen"])
    # pipeline depths (--quick: the first case): planned, each depth lowered
    (st,) = report["stages"]
    assert st["status"] == "planned" and st["chosen"] in (2, 3, 4) and st["chunk"] == 16, st
    # a split's merge as a kernel and in the last blocks (--quick: layernorm): one launch less
    (mg,) = report["merges"]
    assert mg["status"] == "planned", mg
    kernel, tail = mg["merges"]["kernel"], mg["merges"]["last-block"]
    assert tail["launches"] < kernel["launches"] and tail["split"] == kernel["split"]
    assert tail["predicted_seconds"] < kernel["predicted_seconds"]
    # the gradient of a gather as a scatter-add (--quick: the uniform tokens): two launches
    (sc,) = report["scatter"]
    assert sc["status"] == "planned" and sc["engine"] == ["scatter-add"], sc
    assert sc["launches"] == 2 and sc["predicted_seconds"] < 1e-3


def test_kendall_tau_against_sign_matrices():
    import numpy as np
    tau = _gpu_check().kendall_tau
    rng = np.random.default_rng(7)
    for n in (2, 5, 9):
        xs, ys = rng.random(n), rng.random(n)
        sx, sy = np.sign(xs[:, None] - xs[None, :]), np.sign(ys[:, None] - ys[None, :])
        expected = (sx * sy).sum() / (n * (n - 1))
        assert abs(tau(list(xs), list(ys)) - expected) < 1e-12
    assert tau([1, 2, 3], [1, 2, 3]) == 1.0 and tau([1, 2, 3], [3, 2, 1]) == -1.0
