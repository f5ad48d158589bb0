"""`napkin library`: every library diagram listed with its description; one printed as the
text that loads as that diagram; a wrong name an error with the nearest one."""

from __future__ import annotations

import napkin
from napkin.diagrams.sources import LIBRARY_DIR

from .test_cli import run_cli


def test_the_list_names_every_diagram_with_its_first_comment(capsys):
    status, out, err = run_cli(capsys, "library")
    assert status == 0, err
    rows = dict(line.split(None, 1) for line in out.splitlines())
    files = sorted(LIBRARY_DIR.glob("*.napkin"))
    assert sorted(rows) == [p.stem for p in files] and len(files) > 10
    for p in files:
        first = p.read_text().splitlines()[0]
        assert first.startswith("# ") and rows[p.stem] == first[2:].strip()


def test_a_name_prints_the_text_that_loads_as_that_diagram(capsys, tmp_path):
    status, out, err = run_cli(capsys, "library", "gqa_attention")
    assert status == 0, err
    assert out == (LIBRARY_DIR / "gqa_attention.napkin").read_text()
    mine = tmp_path / "mine.napkin"
    mine.write_text(out)
    a, b = napkin.load(str(mine)), napkin.load("gqa_attention")
    assert [e.name for e in a.equations] == [e.name for e in b.equations]
    assert [(s.name, s.axes, s.dtype) for s in a.inputs] == \
        [(s.name, s.axes, s.dtype) for s in b.inputs]


def test_a_wrong_name_is_an_error_with_the_nearest(capsys):
    status, out, err = run_cli(capsys, "library", "atention")
    assert status == 1 and out == ""
    assert "N0801" in err and "`attention`" in err and "Traceback" not in err
