"""`napkin draw FILE|NAME [-o OUT.svg]`: the diagram as a picture (SVG)."""

from __future__ import annotations

import click

from ..cli_common import diagram_options, load_diagram
from ..compiler.draw import draw
from ..runtime.files import write_atomic


@click.command("draw")
@diagram_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the SVG to this file (atomically) instead of stdout.")
def command(diagram: str, sizes: dict[str, int], output: str | None) -> None:
    """Draw a diagram as an SVG neural circuit diagram, read left to right."""
    svg = draw(load_diagram(diagram, sizes))
    if output:
        write_atomic(output, svg)
    else:
        click.echo(svg, nl=False)
