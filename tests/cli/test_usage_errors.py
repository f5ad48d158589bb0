"""click's own usage errors (a value its types refuse, a missing required option or argument,
an unknown option, an option without its value, an unknown command) printed click's usage
text with no code or hint: each is napkin's N0804 with a help line, exit status 2, as
napkin's own option checks give (api/usage_errors.py, one conversion for every option)."""

from __future__ import annotations

import json

import click
import pytest

from napkin.cli import COMMANDS, cli, main


def _err(capsys, args) -> str:
    capsys.readouterr()
    assert main(args) == 2, args
    err = capsys.readouterr().err
    assert "Usage:" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("args, expected", [
    (["run", "softmax", "--seed", "abc"],
     "error[N0804]: --seed: 'abc' is not a valid integer\n"
     "  = help: --seed INTEGER: Seed of the random inputs.\n"),
    (["bench", "softmax"],
     "error[N0804]: missing option --shape\n"
     "  = help: --shape NAME=SIZE,...: Sizes of the dynamic axes: "
     "--shape b=4,h=16,q=4096,x=4096.\n"),
    (["run", "softmax", "--timeout", "x"],
     "error[N0804]: napkin run has no option --timeout\n"
     "  = help: `napkin run --help` lists its options\n"),
    (["run", "softmax", "--sed", "3"],
     "error[N0804]: napkin run has no option --sed\n  = help: did you mean `--seed`, `--save` or `--shape`?\n"),
    (["run", "softmax", "--seed"],
     "error[N0804]: option '--seed' requires an argument\n"
     "  = help: --seed INTEGER: Seed of the random inputs.\n"),
    (["check"],
     "error[N0804]: missing argument FILE|NAME\n"
     "  = help: give it: napkin check FILE|NAME (`napkin check --help`)\n"),
    (["chek", "softmax"],
     "error[N0804]: no such command 'chek'\n  = help: did you mean `check` or `cache`?\n"),
])
def test_click_usage_errors_are_napkins(capsys, args, expected):
    assert _err(capsys, args) == expected


def test_json_diagnostics_hold_them_too(capsys):
    """click stops before it reads --diagnostics json: the arguments are read for it."""
    (item,) = json.loads(_err(capsys, ["run", "softmax", "--seed", "x", "--diagnostics",
                                       "json"]))
    assert item["code"] == "N0804" and item["help"].startswith("--seed INTEGER"), item


def _valued(command):
    """(option, a value its type refuses or None) of each option of `command` that takes one."""
    for p in command.params:
        if isinstance(p, click.Option) and not p.is_flag:
            refused = "x!" if isinstance(p.type, (click.types.IntParamType,
                                                  click.types.FloatParamType,
                                                  click.Choice)) else None
            yield max(p.opts, key=len), refused


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_of_every_command_fails_in_napkins_form(capsys, name):
    command = cli.get_command(click.Context(cli), name)
    for sub, cmd in (getattr(command, "commands", None) or {name: command}).items():
        path = [name] + ([sub] if sub != name else [])
        diagram = ["softmax"] if any(isinstance(p, click.Argument) and p.required
                                     for p in cmd.params) else []
        for option, refused in _valued(cmd):
            err = _err(capsys, path + diagram + [option])            # its value left out
            assert err.startswith(f"error[N0804]: option '{option}' requires an argument\n"), err
            written = err.split("\n  = help: ", 1)[1].split(": ", 1)[0]   # `-D, --define NAME=SIZE`
            assert option in written.split(), err
            if refused is not None:
                err = _err(capsys, path + diagram + [option, refused])
                assert err.startswith(f"error[N0804]: {option}: 'x!' is not"), err
        err = _err(capsys, path + diagram + ["--no-such-option"])
        assert err.startswith(f"error[N0804]: napkin {' '.join(path)} has no option "
                              "--no-such-option\n"), err
