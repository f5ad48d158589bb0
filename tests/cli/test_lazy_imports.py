"""The command line imports what a command uses: `napkin check` neither NumPy, sympy, jinja2
nor rich; `napkin explain` neither jinja2 nor NVRTC (without --ptxas); `napkin compile --emit
cuda` neither NVRTC nor rich; and output is unchanged by it (the command list, help,
suggestions, diagnostics as text and JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from napkin import cli
from napkin.cli import main
from napkin.diagrams.diagnostics import NapkinError
from napkin.diagrams.render import render_text

HEAVY = ("sympy", "jinja2", "rich", "ml_dtypes", "matplotlib", "cupy", "torch", "cuda")


def loaded_after(*args: str, cwd: str | None = None) -> tuple[set[str], str, str]:
    """Top-level packages imported by `napkin ARGS` in a fresh interpreter, and its output."""
    code = ("import sys; from napkin.cli import main; status = main(sys.argv[1:]); "
            "print('\\nMODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})), "
            "file=sys.stderr); sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)
    assert done.returncode == 0, done.stderr
    err, _, modules = done.stderr.rpartition("\nMODULES ")
    return set(modules.split()), done.stdout, err


def test_check_imports_the_front_end_only(tmp_path):
    modules, out, err = loaded_after("check", "attention", cwd=str(tmp_path))
    assert out.startswith("<library:attention>: ok") and err == ""
    assert not modules & {*HEAVY, "numpy"}, modules & {*HEAVY, "numpy"}


def test_check_with_json_diagnostics_prints_them_without_rich(tmp_path):
    modules, _, err = loaded_after("check", "attention", "--diagnostics", "json",
                                   cwd=str(tmp_path))
    assert json.loads(err) == [] and "rich" not in modules


def test_explain_loads_neither_jinja_nor_nvrtc(tmp_path):
    modules, out, _ = loaded_after("explain", "attention", cwd=str(tmp_path))
    assert "attention" in out
    bad = modules & {"jinja2", "rich", "ml_dtypes", "matplotlib", "cupy", "torch", "cuda"}
    assert not bad, bad


def test_compile_to_cuda_loads_no_nvrtc_and_no_rich(tmp_path):
    modules, out, _ = loaded_after("compile", "matmul", "--emit", "cuda", cwd=str(tmp_path))
    assert "__global__" in out
    bad = modules & {"rich", "ml_dtypes", "matplotlib", "cupy", "torch", "cuda"}
    assert not bad, bad


def test_every_command_module_is_listed_under_its_name():
    commands = Path(cli.__file__).parent / "commands"
    modules = {p.stem for p in commands.glob("*.py") if p.stem != "__init__"}
    assert set(cli.COMMANDS.values()) == modules
    ctx = cli.cli.make_context("napkin", ["check", "attention"], resilient_parsing=True)
    for name in cli.COMMANDS:
        assert cli.cli.get_command(ctx, name).name == name


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == sorted(cli.COMMANDS)


def test_a_misspelt_command_is_answered_with_the_nearest(capsys):
    status = main(["chek", "attention"])
    err = capsys.readouterr().err
    # the suggestions come from every command, as when all were imported up front
    assert status == 2
    assert "error[N0804]: no such command 'chek'\n  = help: did you mean `check` or `cache`?" \
        in err, err


@pytest.mark.parametrize("text", ["axis d = 4\nin X[a]: f16\nout Y\nY[a] = X +\n",
                                  "in X[a d]: f16\nout Y\nY[a] = X\n"])
def test_diagnostics_print_as_render_text_says(capsys, tmp_path, text):
    path = tmp_path / "bad.napkin"
    path.write_text(text)
    import napkin
    with pytest.raises(NapkinError) as exc:
        napkin.load(str(path))
    capsys.readouterr()
    status = main(["check", str(path)])
    err = capsys.readouterr().err
    assert status == 1
    assert err == render_text(exc.value)
