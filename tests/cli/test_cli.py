"""The command line: check, compile, run; exit statuses; no traceback for user mistakes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from napkin.cli import main


def run_cli(capsys, *args):
    capsys.readouterr()
    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_check_prints_the_summary(capsys):
    status, out, err = run_cli(capsys, "check", "attention")
    assert status == 0, err
    assert "axes:    b=dynamic, h=dynamic, q=dynamic, x=dynamic, d=64" in out
    assert "S[b h q x]  contracts d" in out and "P[b h q x]  softmax along x" in out
    assert "O[b h q d]  contracts x" in out


def test_check_with_define(capsys):
    status, out, _ = run_cli(capsys, "check", "attention", "-D", "d=128")
    assert status == 0 and "d=128" in out


def test_compile_emit_ir_and_ast(capsys, tmp_path):
    status, out, _ = run_cli(capsys, "compile", "matmul", "--emit", "ir")
    assert status == 0 and "contract[k]" in out
    status, out, _ = run_cli(capsys, "compile", "matmul", "--emit", "ast")
    assert status == 0 and "Equation(name=Name(text='C'" in out
    target = tmp_path / "m.ir"
    status, out, _ = run_cli(capsys, "compile", "matmul", "--emit", "ir", "-o", str(target))
    assert status == 0 and out == "" and "contract[k]" in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["m.ir"]


def test_run_random_inputs_is_deterministic(capsys):
    status, out1, err = run_cli(capsys, "run", "attention", "--shape", "b=2,h=3,q=37,x=50")
    assert status == 0, err
    assert out1.startswith("O  shape=(2, 3, 37, 64)  dtype=f16  sum=")
    _, out2, _ = run_cli(capsys, "run", "attention", "--shape", "b=2,h=3,q=37,x=50")
    _, out3, _ = run_cli(capsys, "run", "attention", "--shape", "b=2,h=3,q=37,x=50", "--seed", "1")
    assert out1 == out2 != out3


def test_run_npz_round_trip(capsys, tmp_path, rng):
    A, B = rng.standard_normal((5, 7)).astype(np.float16), rng.standard_normal((7, 3)).astype(np.float16)
    np.savez(tmp_path / "in.npz", A=A, B=B)
    status, out, err = run_cli(capsys, "run", "matmul", "--inputs", str(tmp_path / "in.npz"),
                               "--save", str(tmp_path / "out.npz"))
    assert status == 0, err
    with np.load(tmp_path / "out.npz") as saved:
        assert saved.files == ["C"]
        expected = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float16)
        np.testing.assert_array_equal(saved["C"], expected)
    assert "C  shape=(5, 3)  dtype=f16" in out


def test_run_a_file_with_two_outputs(capsys, tmp_path):
    path = tmp_path / "two.napkin"
    path.write_text("axis a\nin X[a]: f32\nY[a] = X * 2\nZ[a] = X + 1\nout Y: f32, Z: bf16\n")
    status, out, err = run_cli(capsys, "run", str(path), "--shape", "a=4",
                               "--save", str(tmp_path / "o.npz"))
    assert status == 0, err
    assert out.count("shape=(4,)") == 2 and "dtype=bf16" in out
    with np.load(tmp_path / "o.npz") as saved:
        assert saved.files == ["Y", "Z"]


@pytest.mark.parametrize("args, status, code", [
    (["check", "nosuch"], 1, "N0801"),
    (["run", "matmul"], 1, "N0805"),
    (["run", "attention", "--shape", "q=x"], 2, "N0804"),
    (["check", "attention", "-D", "e=3"], 1, "N0209"),
    (["run", "matmul", "--backend", "warp"], 2, "N0808"),
])
def test_errors_exit_with_their_status(capsys, args, status, code):
    got, out, err = run_cli(capsys, *args)
    assert got == status and f"error[{code}]" in err and "Traceback" not in err and out == ""


def test_bad_diagram_exits_1_with_rendered_error(capsys, tmp_path):
    path = tmp_path / "bad.napkin"
    path.write_text("axis a\nin X[a]: f32\nY[a] = X + W\nout Y: f32\n")
    status, out, err = run_cli(capsys, "check", str(path))
    assert status == 1 and out == ""
    assert f"--> {path}:3:12" in err and "^" in err and "help:" in err


def test_json_diagnostics(capsys, tmp_path):
    path = tmp_path / "bad.napkin"
    path.write_text("axis a\nin X[a]: f32, W[a]: f32\nY[a] = X * 2\nZ[a] = X Q\nout Y: f32\n")
    status, _, err = run_cli(capsys, "check", str(path), "--diagnostics", "json")
    assert status == 1
    items = json.loads(err)
    assert [(i["severity"], i["code"]) for i in items] == [("error", "N0102")]
    assert items[0]["span"]["line"] == 4 and items[0]["file"] == str(path)


def test_warnings_go_to_stderr_and_do_not_fail(capsys, tmp_path):
    path = tmp_path / "warn.napkin"
    path.write_text("axis a\nin X[a]: f32, W[a]: f32\nY[a] = X * 2\nout Y: f32\n")
    status, out, err = run_cli(capsys, "check", str(path))
    assert status == 0 and "warning[N0701]" in err and "warning[" not in out


def test_usage_error_exits_2(capsys):
    status, _, err = run_cli(capsys, "compile", "matmul", "--emit", "nonsense")
    assert status == 2 and "error[N0804]: --emit: 'nonsense' is not one of" in err, err


def test_internal_error_exits_101_with_please_report(capsys, monkeypatch):
    from napkin.commands import check
    monkeypatch.setattr(check, "summary", lambda d: 1 / 0)
    status, _, err = run_cli(capsys, "check", "matmul")
    assert status == 101 and "please report" in err and "ZeroDivisionError" in err


def _console_script() -> str:
    """The `napkin` script installed with this interpreter (not whatever PATH finds: the
    tests must not depend on an activated virtual environment)."""
    names = ("napkin.exe", "napkin") if os.name == "nt" else ("napkin",)
    folders = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    for folder in folders:
        for name in names:
            if (folder / name).is_file():
                return str(folder / name)
    pytest.fail(f"no napkin console script in {[str(f) for f in folders]}: is napkin installed?")


def test_console_script_and_module_entry_points(tmp_path):
    script = _console_script()
    for cmd in ([script], [sys.executable, "-m", "napkin"]):
        done = subprocess.run(cmd + ["check", "softmax"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "Y[r c]  softmax along c" in done.stdout
    bad = tmp_path / "bad.napkin"
    bad.write_bytes(b"axis a\nin X[a]: f32\nY[a] = \xff\n")
    done = subprocess.run([script, "run", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "N0104" in done.stderr and "Traceback" not in done.stderr


def test_emulated_attention_matches_the_reference(capsys, tmp_path):
    from napkin.runtime import compare
    shape = "b=2,h=3,q=77,x=130"
    for backend in ("emulate", "reference"):
        status, out, err = run_cli(capsys, "run", "attention", "--backend", backend, "--shape", shape,
                                   "--save", str(tmp_path / f"{backend}.npz"))
        assert status == 0, err
        assert out.startswith("O  shape=(2, 3, 77, 64)  dtype=f16")
    with np.load(tmp_path / "emulate.npz") as e, np.load(tmp_path / "reference.npz") as r:
        err = np.max(np.abs(e["O"].astype(np.float64) - r["O"].astype(np.float64)))
        assert 0 < err < 4 * compare.floor("f16", 1.0)   # both rounded to f16 once


def test_compile_emits_every_stage(capsys, tmp_path):
    status, out, _ = run_cli(capsys, "compile", "attention")
    assert status == 0 and 'extern "C" __global__' in out and "napkin_k0" in out
    status, out, _ = run_cli(capsys, "compile", "attention", "--emit", "ptx", "--arch", "sm_90")
    assert status == 0 and ".entry napkin_k0" in out and ".target sm_90" in out
    status, _, _ = run_cli(capsys, "compile", "attention", "--emit", "cubin", "--arch", "sm_80",
                           "-o", str(tmp_path / "a.cubin"))
    assert status == 0 and (tmp_path / "a.cubin").read_bytes()[:4] == b"\x7fELF"
    status, out, _ = run_cli(capsys, "compile", "mlp", "--emit", "kernels", "--shape",
                             "t=4096,m=4096,f=16384,o=4096")
    assert status == 0 and out.startswith("k0: H") and "boundary: H goes through" in out
    status, out, _ = run_cli(capsys, "compile", "softmax", "--emit", "program")
    assert status == 0 and "kernel napkin_k0" in out
    status, out, _ = run_cli(capsys, "compile", "softmax", "--emit", "plan")
    assert status == 0 and json.loads(out)["kernels"][0]["name"] == "k0"
    status, _, err = run_cli(capsys, "compile", "softmax", "--emit", "ptx", "--arch", "sm_70")
    assert status == 1 and "N0802" in err
    status, _, err = run_cli(capsys, "compile", "softmax", "--arch", "sm_12")   # CUDA C too
    assert status == 1 and "N0802" in err


def test_run_check_compares_with_the_reference(capsys):
    status, out, err = run_cli(capsys, "run", "attention", "--backend", "emulate", "--shape",
                               "b=1,h=2,q=33,x=65", "--check")
    assert status == 0, err
    assert "  matches the float64 reference: max error" in out and "<= budget" in out


def test_run_check_exits_101_on_a_mismatch(capsys, monkeypatch):
    from napkin.kernel import Kernel
    real = Kernel.__call__

    def off_by_a_bit(self, *args, **kw):
        return tuple(o + 0.5 for o in real(self, *args, **kw))
    monkeypatch.setattr(Kernel, "__call__", off_by_a_bit)
    status, out, err = run_cli(capsys, "run", "softmax", "--shape", "r=3,c=17", "--check")
    assert status == 101
    assert "DOES NOT MATCH the float64 reference: max error 0.5 > budget" in out
    assert "this is a bug in napkin; please report it" in err and "Traceback" not in err


def test_run_takes_schedule_hints(capsys):
    # the hints reach the planner: a legal one runs and checks, an illegal one is its error
    args = ["run", "attention", "--backend", "interpret", "--shape", "b=1,h=1,q=37,x=70"]
    assert main(args + ["--stream", "x=16", "--group", "q=16", "--check"]) == 0
    assert "matches the float64 reference" in capsys.readouterr().out
    assert main(args + ["--stream", "q=64"]) == 1
    assert "N0604" in capsys.readouterr().err


@pytest.mark.parametrize("hint, code", [("--split=kk=4", "N0201"), ("--lanes=k=3", "N0304"),
                                        ("--group=m=0", "N0304"), ("--stream=zz=8", "N0201")])
def test_run_checks_hints_on_the_reference_backend_too(hint, code, capsys):
    """The reference backend plans nothing: a misspelt or impossible hint ran without a word
    (exit 0) where the other backends refused it."""
    args = ["run", "matmul", "--shape", "m=3,k=5,n=2", hint]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"error[{code}]" in err and "help:" in err and "Traceback" not in err
    assert main(["run", "matmul", "--shape", "m=3,k=5,n=2", "--split=k=2"]) == 0


def test_check_refuses_a_split_hint_no_reduction_can_merge(tmp_path, capsys):
    """`napkin check` reads split hints as planning does: N0607 at the hint's line (it said
    `ok` and only explain or run refused it)."""
    path = tmp_path / "split.napkin"
    path.write_text("axis r, c\nin X[r c]: f32\nY[r c] = X * 2.0\nsplit r by 4\nout Y: f32\n")
    capsys.readouterr()
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "error[N0607]: cannot split `r`" in err and "split.napkin:4:1" in err
    path.write_text("axis r, c\nin X[r c]: f32\nY[r] = sum[c](X)\nsplit c by 4\nout Y: f32\n")
    assert main(["check", str(path)]) == 0
