"""`napkin draw --plan` and `napkin explain --plot/--bench` from the command line."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import napkin
from napkin.cli import main
from napkin.draw import draw_plan
from napkin.draw.roofline import DPI, HEIGHT, WIDTH, predicted, read_bench
from napkin.explain import report
from napkin.compiler.plan import plan

FIGURE9 = str(Path(__file__).parents[2] / "docs" / "examples" / "figure9.napkin")


def run_cli(capsys, *args):
    capsys.readouterr()
    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_draw_plan_writes_the_planned_picture(capsys, tmp_path):
    target = tmp_path / "a.svg"
    status, out, err = run_cli(capsys, "draw", "attention", "--plan", "--shape",
                               "b=4,h=16,q=4096,x=4096", "-o", str(target))
    assert status == 0, err
    assert out == "" and [p.name for p in tmp_path.iterdir()] == ["a.svg"]
    p = plan(napkin.load("attention"), "h100", {"b": 4, "h": 16, "q": 4096, "x": 4096})
    assert target.read_text() == draw_plan(p)


def test_planning_options_imply_plan(capsys):
    status, out, err = run_cli(capsys, "draw", FIGURE9, "--target", "two-level:M=1e12",
                               "--no-fusion", "--shape", "q=512,x=1024,d=64", "--group", "q=512")
    assert status == 0, err
    root = ET.fromstring(out)
    assert root.find("{http://www.w3.org/2000/svg}title").text == "figure9.napkin on two-level:M=1e12"
    kernels = {e.get("data-kernel") for e in root.iter() if e.get("class") == "kernel"
               and e.get("data-kernel")}
    assert kernels == {"k0", "k1"}
    assert ">6,684,672</text>" in out                    # 3qx + xd + qd values, 4 bytes each


def test_draw_plan_errors_are_clean(capsys, tmp_path):
    status, _, err = run_cli(capsys, "draw", "attention", "--target", "nope")
    assert status == 2 and "N0605" in err and "Traceback" not in err
    status, _, err = run_cli(capsys, "draw", "attention", "--plan", "--shape", "q=x")
    assert status == 2 and "N0804" in err


@pytest.fixture
def bench_file(tmp_path):
    rep = report(plan(napkin.load("attention"), "h100"))
    k = rep["kernels"][0]
    records = [{"kernel": "attention", "source": "napkin", "seconds": 2 * k["predicted_seconds"],
                "flops": k["flops"], "bytes": rep["H_bytes"]},
               {"kernel": "attention", "source": "sdpa", "seconds": float("nan"),
                "flops": k["flops"], "bytes": rep["H_bytes"]}]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(records))
    return path, rep


def test_roofline_png(capsys, tmp_path, bench_file):
    image = pytest.importorskip("matplotlib.image")
    bench, rep = bench_file
    out = tmp_path / "roofline.png"
    status, text, err = run_cli(capsys, "explain", "attention", "--plot", str(out),
                                "--bench", str(bench))
    assert status == 0, err
    assert "kernel k0" in text                            # the report is printed as before
    px = image.imread(str(out))
    assert px.shape[:2] == (int(HEIGHT * DPI), int(WIDTH * DPI))
    grey = px[..., :3].mean(axis=2)
    assert 0.005 < (grey < 0.5).mean() < 0.3 and (grey > 0.9).mean() > 0.5
    orange = (abs(px[..., 0] - 0xe0 / 255) < 0.1) & (abs(px[..., 1] - 0x7b / 255) < 0.1)
    assert orange.sum() > 20                              # the predicted point
    assert {p.name for p in tmp_path.iterdir()} == {"bench.json", "roofline.png"}  # no temporary


def test_roofline_points_are_the_reports(bench_file):
    bench, rep = bench_file
    (point,) = predicted(rep)
    k = rep["kernels"][0]
    assert point["intensity"] == k["arithmetic_intensity"] == k["flops"] / k["levels"][0]["H_bytes"]
    assert point["flops_per_second"] == k["flops"] / k["predicted_seconds"]
    (measured,) = read_bench(str(bench))                  # the NaN record is skipped
    assert measured["label"] == "attention (napkin)"
    assert measured["flops_per_second"] == pytest.approx(point["flops_per_second"] / 2)


def test_without_matplotlib_explain_plot_exits_3(capsys, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "r.png"
    status, text, err = run_cli(capsys, "explain", "matmul", "--plot", str(out))
    assert status == 3 and text == ""
    assert "N0901" in err and "pip install 'napkin[plot]'" in err and "Traceback" not in err
    assert not out.exists()


def test_bench_needs_plot_and_a_good_file(capsys, tmp_path):
    status, _, err = run_cli(capsys, "explain", "matmul", "--bench", "b.json")
    assert status == 2 and "--plot" in err
    pytest.importorskip("matplotlib")
    bad = tmp_path / "b.json"
    for content, words in (("{", "cannot read"), ('{"a": 1}', "JSON list"),
                           ('[{"kernel": "k0", "seconds": 1}]', "lacks flops, bytes")):
        bad.write_text(content)
        status, _, err = run_cli(capsys, "explain", "matmul", "--plot", str(tmp_path / "r.png"),
                                 "--bench", str(bad))
        assert status == 1 and "N0806" in err and words in err, err
        assert not (tmp_path / "r.png").exists()


@pytest.mark.parametrize("args, name, magic", [
    (("draw", "attention", "-o"), "a.png", b"\x89PNG\r\n\x1a\n"),
    (("draw", "attention", "--plan", "-o"), "a.svg", b"<svg"),
    (("draw", "attention", "-o"), "a", b"<svg"),                    # no suffix: SVG
    (("explain", "attention", "--plot"), "r.svg", b"<?xml"),
    (("explain", "attention", "--plot"), "r", b"\x89PNG\r\n\x1a\n"),  # no suffix: PNG
])
def test_pictures_are_written_in_the_format_their_name_says(capsys, tmp_path, args, name, magic):
    """`draw -o a.png` wrote SVG text into a .png file."""
    pytest.importorskip("matplotlib")
    out = tmp_path / name
    status, _, err = run_cli(capsys, *args, str(out))
    assert status == 0, err
    assert out.read_bytes().lstrip()[:len(magic)] == magic


@pytest.mark.parametrize("args", [("draw", "attention", "-o"), ("explain", "attention", "--plot")])
def test_other_picture_formats_are_refused_before_any_work(capsys, tmp_path, args):
    out = tmp_path / "picture.jpg"
    status, _, err = run_cli(capsys, *args, str(out))
    assert status == 2 and "N0804" in err and ".svg or .png" in err
    assert not out.exists()


def test_without_resvg_a_png_picture_exits_3_and_svg_still_works(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "resvg_py", None)
    out = tmp_path / "a.png"
    status, text, err = run_cli(capsys, "draw", "matmul", "-o", str(out))
    assert status == 3 and "N0901" in err and "resvg-py" in err and "write .svg" in err
    assert not out.exists() and "Traceback" not in err
    status, _, err = run_cli(capsys, "draw", "matmul", "-o", str(tmp_path / "a.svg"))
    assert status == 0, err
