"""`napkin library [NAME]`: the standard library's diagrams, listed or printed.

Without NAME: each diagram's name and the first line of its comment. With NAME: its text,
to read or to start a diagram of one's own from (`napkin library attention > mine.napkin`).
"""

from __future__ import annotations

import click

from ..diagrams.diagnostics import did_you_mean, error
from ..diagrams.sources import library_names, library_source


@click.command("library")
@click.argument("name", required=False, metavar="[NAME]")
def command(name: str | None) -> None:
    """List the library's diagrams, or print one's text (NAME)."""
    names = library_names()
    if name is None:
        width = max(len(n) for n in names)
        for n in names:
            click.echo(f"{n.ljust(width)}  {_about(library_source(n).text)}".rstrip())
        return
    if name not in names:
        raise error("N0801", f"`{name[:200]}` is not a library diagram",
                    help=did_you_mean(name, names, "library diagrams: " + ", ".join(names)))
    click.echo(library_source(name).text, nl=False)


def _about(text: str) -> str:
    """The first comment line of a diagram (its description), without the `#`."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[1:].strip() if line.strip().startswith("#") else ""
    return ""
