"""Every diagnostic code: listed in docs/errors.md, and a fixture whose rendered message is asserted.

Diagram mistakes have a fixture diagram `errors/NXXXX.napkin`; the others (bytes,
sizes at run time, command-line values, backends) are triggered below. Each
renders to `errors/NXXXX.expected` exactly (`pytest --update-goldens` rewrites).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

import napkin
from napkin.cli import main
from napkin.diagrams import parser
from napkin.diagrams.codes import CODES
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.render import render_text
from napkin.runtime import nvrtc

HERE = Path(__file__).parent / "errors"
DOCS = Path(__file__).parents[2] / "docs" / "errors.md"


def _raises(fn) -> str:
    with pytest.raises(NapkinError) as exc:
        fn()
    return render_text(exc.value)


# an f32 input times an f16 weight: the user's f32 is never rounded for the tensor cores
MIXED = "axis t, m, o\nin X[t m]: f32\nin W[m o]: f16\nY[t o] = X * W\nout Y: f32\n"


def _write(folder, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


def _cli(args, capsys, expected_status) -> str:
    capsys.readouterr()
    assert main(args) == expected_status
    return capsys.readouterr().err


def _no_nvrtc(monkeypatch):
    real = importlib.import_module

    def fake(name, *a, **k):
        if name.startswith("cuda.bindings"):
            raise ImportError("No module named 'cuda'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    monkeypatch.setattr(nvrtc, "_backend", None)
    return _raises(nvrtc.version)


def _memory(monkeypatch, nbytes: int) -> None:
    """The machine's memory as N0310 sees it, fixed so that the message is the same anywhere."""
    from napkin.runtime import checks
    monkeypatch.setattr(checks, "memory_bytes", lambda: nbytes)


def _divergent_barrier():
    from napkin.runtime import emulate
    source = ('extern "C" __global__ void k(float* y) {\n'
              '  if (threadIdx.x >= 16) return;\n'
              '  __syncthreads();\n'
              '  y[threadIdx.x] = 1.0f;\n'
              '}\n')
    emulate.run(source, {"k": (emulate.Param("ptr", "float"),)},
                [emulate.Launch("k", (1, 1, 1), (32, 1, 1), 0, ("y",))],
                {"y": np.zeros(32, np.float32)}, timeout_s=60)


def _inputs_file(tmp_path):
    np.savez(tmp_path / "in.npz", A=np.ones((2, 3)), Z=np.ones(3))
    return "in.npz"


ATTENTION = (Path(__file__).parents[2] / "diagrams" / "library" / "attention.napkin").read_text()


def _plan(extra: str, target: str = "h100"):
    from napkin.compiler.plan import plan
    d = napkin.load(Source("hint.napkin", ATTENTION + extra))
    return plan(d, target, {"b": 4, "h": 16, "q": 4096, "x": 4096})


TRIGGERS = {
    "N0602": lambda tp, cap, mp: _raises(lambda: _plan("group q by 32 at l3\n")),
    "N0603": lambda tp, cap, mp: _raises(lambda: _plan("group q by 1024 at registers\n")),
    "N0604": lambda tp, cap, mp: _raises(lambda: _plan("group x by 64\n")),
    "N0605": lambda tp, cap, mp: _cli(["explain", "attention", "--target", "tpu"], cap, 2),
    "N0606": lambda tp, cap, mp: (mp.chdir(tp), _write(tp, "mixed.napkin", MIXED), _cli(
        ["explain", "mixed.napkin", "--engine", "tensor-cores"], cap, 1))[-1],
    "N0607": lambda tp, cap, mp: _raises(lambda: _plan("split q by 8\n")),
    "N0608": lambda tp, cap, mp: _raises(lambda: __import__("napkin.compiler.plan").compiler.plan
                                         .plan(napkin.load("varlen_attention"), "h100",
                                               {"q": 100, "x": 100},
                                               data={"doc": np.zeros(99, np.int32)})),
    "N0104": lambda tp, cap, mp: _raises(lambda: parser.decode(b"axis a\nin X[a]: f\xff32\n", "bad.napkin")),
    "N0209": lambda tp, cap, mp: _raises(lambda: napkin.load("matmul", kk=3)),
    "N0308": lambda tp, cap, mp: _raises(lambda: napkin.run(
        Source("shape.napkin", "axis a, b = 4\nin X[a b]: f32\nY[a b] = X * 2\nout Y: f32"),
        np.ones((3, 5)))),
    "N0407": lambda tp, cap, mp: _raises(lambda: napkin.run(
        Source("lookup.napkin", "axis t, v, m\nin E[v m]: f32\nin tok[t]: i32\n"
               "Y[t m] = E[tok[t] m]\nout Y: f32"), np.ones((5, 3), np.float32),
        np.array([0, 4, 5, 1], np.int32))),
    "N0309": lambda tp, cap, mp: _raises(lambda: napkin.run("attention", np.ones((1, 1, 2, 64)),
                                                             np.ones((1, 1, 3, 64)))),
    "N0310": lambda tp, cap, mp: _raises(lambda: (_memory(mp, 16 * 10**9), napkin.run(
        "axis a, b\nin X[a]: f32\nin Y[b]: f32\nZ[a b] = X * Y\nout Z: f32",
        np.ones(3_000_000, np.float32), np.ones(3_000_000, np.float32)))),
    "N0501": lambda tp, cap, mp: _raises(lambda: parser.parse(Source("big.napkin", "#" * (2 << 20)))),
    "N0503": lambda tp, cap, mp: _raises(lambda: parser.parse(Source(
        "many.napkin", "axis a\n" + "\n".join(f"Y{i}[a] = 1" for i in range(10_001))))),
    "N0801": lambda tp, cap, mp: _raises(lambda: napkin.load("atention")),
    "N0802": lambda tp, cap, mp: _raises(lambda: nvrtc.validate_arch("sm_75")),
    "N0803": lambda tp, cap, mp: _raises(lambda: nvrtc.validate_options(("-G",))),
    "N0804": lambda tp, cap, mp: _cli(["run", "attention", "--shape", "q=x"], cap, 2),
    "N0805": lambda tp, cap, mp: _cli(["run", "matmul"], cap, 1),
    "N0806": lambda tp, cap, mp: (mp.chdir(tp), _cli(["run", "matmul", "--inputs", _inputs_file(tp)],
                                                     cap, 1))[1],
    "N0807": lambda tp, cap, mp: (mp.chdir(tp), _cli(["compile", "matmul", "-o", "no/such/dir/out.txt"],
                                                     cap, 1))[1],
    "N0808": lambda tp, cap, mp: _cli(["run", "matmul", "--backend", "gpu9000"], cap, 2),
    "N0810": lambda tp, cap, mp: _cli(["grad", "softmax", "--wrt", "Z"], cap, 1),
    "N0811": lambda tp, cap, mp: (mp.chdir(tp), _write(tp, "sm.napkin", "axis r, c\nin X[r c]: f32\n"
                                                       "Y[r c] = softmax[c](X)\nout Y: f32\n"),
                                  _cli(["grad", "sm.napkin", "-o", "sm.napkin"], cap, 1))[2],
    "N0901": lambda tp, cap, mp: _no_nvrtc(mp),
    "N0902": lambda tp, cap, mp: _raises(_divergent_barrier),
    "N0903": lambda tp, cap, mp: _raises(lambda: napkin.compile("softmax", backend="reference")(
        np.ones((5, 4), dtype=np.float16).T)),
}


def _fixture_codes():
    return sorted(p.stem for p in HERE.glob("N*.napkin"))


def test_every_code_has_exactly_one_fixture():
    fixtures = set(_fixture_codes()) | set(TRIGGERS)
    assert not set(_fixture_codes()) & set(TRIGGERS)
    assert fixtures == set(CODES) - PENDING, sorted(set(CODES) ^ fixtures)


def test_every_code_is_documented_with_its_current_fixture():
    text = DOCS.read_text()
    documented = set(re.findall(r"^## (N\d{4})\b", text, flags=re.M))
    assert documented == set(CODES), sorted(documented ^ set(CODES))
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        code = section.split()[0]
        example = re.search(r"```\n(.*?)\n```", section, flags=re.S)
        expected = HERE / f"{code}.expected"
        if expected.exists():
            assert example and example.group(1) == expected.read_text().rstrip(), \
                f"docs/errors.md shows an outdated example for {code}"


# Codes whose fixtures arrive with the module that emits them.
PENDING: set[str] = set()


@pytest.mark.parametrize("code", _fixture_codes())
def test_diagram_fixture(code, golden):
    path = HERE / f"{code}.napkin"
    source = Source(path.name, path.read_text())
    try:
        d = napkin.load(source)
    except NapkinError as exc:
        diags = exc.diagnostics
    else:
        diags = d.warnings
    assert diags and diags[0].code == code, [x.code for x in diags]
    golden(HERE / f"{code}.expected", render_text(diags) + "\n")


@pytest.mark.parametrize("code", sorted(TRIGGERS))
def test_triggered_fixture(code, tmp_path, capsys, monkeypatch, golden):
    text = TRIGGERS[code](tmp_path, capsys, monkeypatch)
    assert f"[{code}]" in text.splitlines()[0], text
    assert "Traceback" not in text
    golden(HERE / f"{code}.expected", text.rstrip("\n") + "\n")


@pytest.mark.parametrize("before, after", [(5000, 10), (10, 5000), (3000, 3000)])
def test_a_long_line_is_shown_around_its_error(before, after):
    # a generated diagram's line (thousands of columns) is cut to a window around the error,
    # the elisions marked, with the underline still under the undefined name
    text = ("axis a\nin X[a]: f32\nY[a] = X +" + " " * before + "Zz * X" + " " * after
            + "# a comment\nout Y: f32\n")
    out = _raises(lambda: napkin.load(text))
    lines = out.splitlines()
    shown = next(i for i, ln in enumerate(lines) if ln.startswith("3 | "))
    source, marks = lines[shown][4:], lines[shown + 1][4:]
    assert max(len(ln) for ln in lines) < 220, max(len(ln) for ln in lines)
    assert source.startswith("...") == (before > 100)
    assert source.endswith("...") == (after > 100)
    col = marks.index("^")
    assert source[col:col + 2] == "Zz" and marks[col:].rstrip() == "^^"
    assert ":3:" in out


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_an_empty_diagram_is_told_where(text):
    # an empty or blank file has no outputs: the error points at line 1, column 1 (it had no
    # location at all, the one diagram mistake without `file:line:column`)
    with pytest.raises(NapkinError) as exc:
        napkin.load(Source("empty.napkin", text))
    (err,) = exc.value.diagnostics
    assert err.code == "N0207" and err.span is not None and err.help
    assert (err.span.line, err.span.col) == (1, 1)
    assert " --> empty.napkin:1:1" in render_text(exc.value)
