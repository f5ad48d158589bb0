"""Without a GPU: napkin bench exits 3; benchmarks/gpu_check.py --dry-run runs through."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from napkin.cli import main

ROOT = Path(__file__).parents[2]


def test_bench_without_a_gpu_exits_3(capsys):
    assert main(["bench", "attention", "--shape", "b=1,h=1,q=64,x=64"]) == 3
    assert "N0901" in capsys.readouterr().err


def test_gpu_check_dry_run(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run",
                           "--quick", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] is True
    assert len(report["checks"]) == 36
    assert all(c["status"] == "compiled" for c in report["checks"]), \
        [c for c in report["checks"] if c["status"] != "compiled"][:1]
    for c in report["checks"]:
        for res in c["resources"].values():
            assert res["spill_stores"] == 0
    assert {t["diagram"] for t in report["timings"]} == {"attention", "matmul"}
    assert all(t["status"] == "planned" and t["predicted_seconds"] > 0 for t in report["timings"])
