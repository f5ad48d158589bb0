"""Where a command may write (-o, --save, --plot, --json, --csv): never onto a file it reads
(N0811: `napkin grad X.napkin -o X.napkin` used to replace the diagram by its gradient),
never into a directory or an empty path (N0807, napkin's message, not click's usage text)."""

from __future__ import annotations

import os

import pytest

from napkin.cli import main

SOFTMAX = "axis r, c\nin X[r c]: f32\nY[r c] = softmax[c](X)\nout Y: f32\n"


def _cli(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    status = main(list(args))
    return status, capsys.readouterr().err


@pytest.mark.parametrize("command", [("grad",), ("compile",), ("compile", "--emit", "plan"),
                                     ("draw",)])
def test_no_command_writes_onto_its_diagram(capsys, tmp_path, command):
    src = tmp_path / "sm.napkin"
    src.write_text(SOFTMAX)
    status, err = _cli(capsys, command[0], str(src), *command[1:], "-o", str(src))
    assert status == 1 and "error[N0811]" in err and "it is the diagram" in err, err
    assert src.read_text() == SOFTMAX                  # untouched


def test_the_same_file_by_another_name_is_refused(capsys, tmp_path, monkeypatch):
    src = tmp_path / "sm.napkin"
    src.write_text(SOFTMAX)
    os.symlink(src, tmp_path / "link.napkin")
    os.link(src, tmp_path / "hard.napkin")
    monkeypatch.chdir(tmp_path)
    for other in ("link.napkin", "hard.napkin", "./sm.napkin"):
        status, err = _cli(capsys, "grad", str(src), "-o", other)
        assert status == 1 and "error[N0811]" in err and f"({src})" in err, err
    assert src.read_text() == SOFTMAX
    # another file is written as before
    assert _cli(capsys, "grad", str(src), "-o", "dsm.napkin")[0] == 0
    assert "dX[r c]" in (tmp_path / "dsm.napkin").read_text()


def test_run_does_not_save_onto_its_inputs_file(capsys, tmp_path):
    inputs = tmp_path / "in.npz"
    assert _cli(capsys, "run", "softmax", "--shape", "r=3,c=5", "--save", str(inputs))[0] == 0
    before = inputs.read_bytes()
    status, err = _cli(capsys, "run", "softmax", "--inputs", str(inputs), "--save", str(inputs))
    assert status == 1 and "error[N0811]" in err and "the --inputs file" in err, err
    assert inputs.read_bytes() == before


@pytest.mark.parametrize("command", [("grad", "softmax", "-o"), ("compile", "softmax", "-o"),
                                     ("draw", "softmax", "-o"), ("run", "softmax", "--shape",
                                                                 "r=2,c=3", "--save")])
def test_a_directory_or_an_empty_path_is_napkins_n0807(capsys, tmp_path, command):
    status, err = _cli(capsys, *command, str(tmp_path))
    assert err == (f"error[N0807]: cannot write {tmp_path}: it is a directory\n"
                   f"  = help: name a file in it (or elsewhere): {tmp_path}/NAME\n"), err
    assert status == 1
    assert "Usage:" not in err and "Traceback" not in err
    status, err = _cli(capsys, *command, "")
    assert status == 1 and "error[N0807]: cannot write '': the path is empty" in err, err


@pytest.mark.parametrize("command", [("grad", "softmax", "-o"), ("compile", "softmax", "-o"),
                                     ("run", "softmax", "--shape", "r=2,c=3", "--save")])
def test_a_dash_is_refused_not_made_a_file(capsys, tmp_path, monkeypatch, command):
    """`-o -` reads as standard output in many tools; it wrote a file named `-` in the
    working directory (replacing one there). It is N0807 now; `./-` names such a file."""
    monkeypatch.chdir(tmp_path)
    status, err = _cli(capsys, *command, "-")
    assert status == 1 and "error[N0807]: cannot write '-'" in err and "./-" in err, err
    assert not (tmp_path / "-").exists()
    assert _cli(capsys, *command, "./-")[0] == 0 and (tmp_path / "-").exists()


def test_bench_refuses_json_and_csv_onto_one_file(capsys, tmp_path, monkeypatch):
    # checked before any work (here, before bench finds no GPU and exits 3)
    monkeypatch.chdir(tmp_path)
    for json_path, csv_path in (("b.out", "b.out"), ("b.out", "./b.out"),
                                (str(tmp_path / "b.out"), "b.out")):
        status, err = _cli(capsys, "bench", "softmax", "--shape", "r=4,c=8", "--json", json_path,
                           "--csv", csv_path)
        assert status == 1 and "error[N0807]" in err and "--json and --csv name the same" \
            in err, err
    assert not (tmp_path / "b.out").exists()
    status, err = _cli(capsys, "bench", "softmax", "--shape", "r=4,c=8", "--json", "b.json",
                       "--csv", "b.csv")
    assert status == 3 and "N0901" in err, err          # apart: on to the missing GPU


def test_a_link_into_a_missing_directory_names_that_directory(capsys, tmp_path):
    """The directory that is missing is the link's target's, not the link's own (which
    exists: N0807 said it did not)."""
    os.symlink(tmp_path / "gone" / "x.cu", tmp_path / "link.cu")
    status, err = _cli(capsys, "compile", "matmul", "-o", str(tmp_path / "link.cu"))
    assert status == 1 and "error[N0807]" in err, err
    assert f"the directory {tmp_path / 'gone'} (where the link {tmp_path / 'link.cu'} leads) " \
        "does not exist" in err, err
    status, err = _cli(capsys, "compile", "matmul", "-o", str(tmp_path / "new" / "x.cu"))
    assert f"the directory {tmp_path / 'new'} does not exist" in err, err
    assert not os.path.exists(tmp_path / "gone")


@pytest.mark.parametrize("command", [["check"], ["compile"], ["explain"], ["draw"], ["grad"],
                                     ["run", "--shape", "r=2,c=3"]])
def test_a_directory_given_as_the_diagram_is_said_to_be_one(capsys, tmp_path, monkeypatch,
                                                            command):
    """`napkin check DIR` said "neither a file nor a library diagram" (`no such file` with a
    slash): it is a directory, and the hint names the diagrams in it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "sm.napkin").write_text(SOFTMAX)
    (tmp_path / "empty").mkdir()
    for given in ("models", "models/"):
        status, err = _cli(capsys, command[0], given, *command[1:])
        assert err == (f"error[N0801]: {given} is a directory, not a diagram file\n"
                       "  = help: give one of its diagrams: models/sm.napkin\n"), err
        assert status == 1
    status, err = _cli(capsys, command[0], "empty", *command[1:])
    assert err.startswith("error[N0801]: empty is a directory, not a diagram file\n  = help: "
                          "give a .napkin file or a library name: alibi_attention,"), err
