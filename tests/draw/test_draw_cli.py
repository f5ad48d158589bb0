"""`napkin draw FILE|NAME [-o OUT] [-D NAME=SIZE]`."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import napkin
from napkin.cli import main
from napkin.draw import draw


def run_cli(capsys, *args):
    capsys.readouterr()
    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_draw_writes_the_file_atomically(capsys, tmp_path):
    target = tmp_path / "a.svg"
    status, out, err = run_cli(capsys, "draw", "attention", "-o", str(target))
    assert status == 0, err
    assert out == ""
    assert [p.name for p in tmp_path.iterdir()] == ["a.svg"]      # no temporary left behind
    svg = target.read_text()
    assert svg == draw(napkin.load("attention"))
    assert ET.fromstring(svg).tag == "{http://www.w3.org/2000/svg}svg"


def test_draw_to_stdout_with_sizes(capsys):
    status, out, err = run_cli(capsys, "draw", "attention", "-D", "d=128")
    assert status == 0, err
    assert out == draw(napkin.load("attention", d=128))
    assert ">d=128</text>" in out


def test_draw_reports_diagram_errors_without_a_traceback(capsys, tmp_path):
    bad = tmp_path / "bad.napkin"
    bad.write_text("axis m\nin A[m]: f16\nB[m] = A * C\nout B: f16\n")
    status, out, err = run_cli(capsys, "draw", str(bad), "-o", str(tmp_path / "b.svg"))
    assert status == 1 and out == ""
    assert "error[" in err and "Traceback" not in err
    assert not (tmp_path / "b.svg").exists()


def test_draw_into_a_missing_directory_is_a_clean_error(capsys, tmp_path):
    status, _, err = run_cli(capsys, "draw", "matmul", "-o", str(tmp_path / "no" / "m.svg"))
    assert status != 0 and "N0807" in err and "Traceback" not in err
