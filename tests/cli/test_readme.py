"""The README's quick start stays true: its napkin commands run, in order, and succeed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from napkin.cli import main

README = Path(__file__).resolve().parents[2] / "README.md"


def quick_start_commands() -> list[list[str]]:
    block = README.read_text().split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    first = next(line for line in block.splitlines() if "pip install -e . " in line)
    return [shlex.split(part)[1:] for part in re.split(r"\s&&\s", first)
            if part.strip().startswith("napkin ")]


def test_the_quick_start_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commands = quick_start_commands()
    assert [c[0] for c in commands] == ["compile", "explain", "run"]
    for argv in commands:
        capsys.readouterr()
        status = main(argv)
        out = capsys.readouterr()
        assert status == 0, (argv, out.err)
    assert (tmp_path / "attention.cu").read_text().count("__global__") == 1
    assert "matches the float64 reference" in out.out
