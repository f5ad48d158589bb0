"""`napkin draw FILE|NAME [--plan ...] [-o OUT.svg|OUT.png]`: the diagram as a picture (SVG;
PNG when the output's name says so, with the `plot` extra).

With `--plan` (or any planning option) the picture is of the plan: arrays coloured by the
memory level they live at, axes relabelled, kernels, loads and stores marked, and the table
of M and H per column underneath.
"""

from __future__ import annotations

import click

from ..cli_common import diagram_options, load_diagram, picture_format, planning_options
from ..draw import draw, draw_plan
from ..runtime.files import check_output, write_atomic


@click.command("draw")
@diagram_options
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write the picture to this file (atomically) instead of stdout: .svg, or "
                   ".png (needs pip install 'napkin[plot]').")
@click.option("--plan", "plan_flag", is_flag=True,
              help="Draw the plan: arrays coloured by memory level, kernels, loads, stores, "
                   "and the table of M and H per column (any planning option implies it).")
@planning_options()
def command(diagram: str, sizes: dict[str, int], output: str | None, plan_flag: bool,
            options, planned: bool) -> None:
    """Draw a diagram as an SVG neural circuit diagram, read left to right."""
    check_output(output, reads=[("the diagram", diagram)])
    fmt = picture_format(output, "-o", "svg")
    if fmt == "png":        # fail before any work when the picture cannot be written
        from ..draw import png
        png.require()
    d = load_diagram(diagram, sizes)
    if plan_flag or planned:
        from .. import pipeline
        svg = draw_plan(pipeline.plan(d, options))
    else:
        svg = draw(d)
    if output is not None:
        write_atomic(output, png.svg_to_png(svg) if fmt == "png" else svg)
    else:
        click.echo(svg, nl=False)
