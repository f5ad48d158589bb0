"""The `napkin` command line: check, explain, compile, run, bench, draw, grad, cache, library.

Diagnostics go to stderr, artifacts to stdout. Exit status: 0 ok, 1 diagram
errors, 2 usage errors, 3 backend unavailable, 101 internal error.
"""

from __future__ import annotations

import importlib
import sys
import traceback

import click

from . import __version__
from .cli_common import OUTPUT, REPORT_URL, diagram_options, load_diagram
from .diagrams.diagnostics import NapkinError
from .diagrams.render import render, to_json

# Each command's module, imported when the command runs (or --help lists them all): `napkin
# check` does not pay for the planner, NumPy or the drawing code that other commands import.
COMMANDS = {"check": "check", "compile": "compile_", "explain": "explain", "run": "run",
            "bench": "bench", "draw": "draw", "cache": "cache", "grad": "grad",
            "library": "library"}


class _LazyGroup(click.Group):
    def list_commands(self, ctx) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx, name: str):
        if name not in self.commands:
            # an unknown name loads them all, so that click suggests the nearest one as before
            for cmd_name in ([name] if name in COMMANDS else COMMANDS):
                if cmd_name not in self.commands:
                    module = importlib.import_module(f".commands.{COMMANDS[cmd_name]}", __package__)
                    self.add_command(module.command, cmd_name)
        return self.commands.get(name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="napkin")
def cli() -> None:
    """napkin: neural circuit diagrams to IO-aware GPU kernels."""


class _Stderr:
    """rich's Console on stderr, made when something is printed (rich takes tens of
    milliseconds to import; a run with nothing to report never imports it)."""

    def __init__(self):
        self._console = None

    def __getattr__(self, name):
        if self._console is None:
            if name == "file":          # --diagnostics json writes to the file directly
                return sys.stderr
            from rich.console import Console
            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return getattr(self._console, name)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the status."""
    OUTPUT.reset()
    status = _main(argv)
    if argv is None:
        sys.exit(status)
    return status


def _main(argv) -> int:
    err = _Stderr()
    try:
        status = cli.main(args=argv, prog_name="napkin", standalone_mode=False)
        OUTPUT.flush(err)
        # (click returns a command's `Exit(code)` as its value when not standalone)
        return status if isinstance(status, int) and not isinstance(status, bool) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        err.print("aborted")
        return 1
    except click.UsageError as exc:   # click's own (`--seed abc`): napkin's N0804, exit 2
        from .usage_errors import from_click
        args = argv if argv is not None else sys.argv[1:]
        if _asks_json(args):
            OUTPUT.format = "json"     # (click stopped before it read --diagnostics)
        OUTPUT.fail(from_click(exc, _context(args)))
        OUTPUT.flush(err)
        return 2
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except NapkinError as exc:
        OUTPUT.fail(exc)
        OUTPUT.flush(err)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except Exception:  # a bug in napkin, never a user mistake
        err.print(traceback.format_exc(), markup=False, highlight=False)
        err.print(f"error: internal error in napkin {__version__}: this is a bug; please report it "
                  f"at {REPORT_URL} with the diagram and command that caused it", markup=False)
        return 101


def _context(argv) -> click.Context:
    """The context of the command `argv` names (else the group's)."""
    top = click.Context(cli, info_name="napkin")
    command = cli.get_command(top, argv[0]) if argv and argv[0] in COMMANDS else None
    return top if command is None else click.Context(command, info_name=argv[0], parent=top)


def _asks_json(argv) -> bool:
    return "--diagnostics=json" in argv or any(
        a == "--diagnostics" and b == "json" for a, b in zip(argv, argv[1:]))


__all__ = ["cli", "main", "diagram_options", "load_diagram", "render", "to_json"]
