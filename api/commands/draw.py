"""`napkin draw FILE|NAME [--plan ...] [-o OUT.svg|OUT.png]`: the diagram as a picture (SVG;
PNG when the output's name says so, with the `plot` extra).

With `--plan` (or any planning option) the picture is of the plan: arrays coloured by the
memory level they live at, axes relabelled, kernels, loads and stores marked, and the table
of M and H per column underneath.
"""

from __future__ import annotations

import click

from ..cli_common import diagram_options, load_diagram, parse_assignments, picture_format
from ..compiler import target as targets
from ..draw import draw, draw_plan
from ..runtime.files import write_atomic


@click.command("draw")
@diagram_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the picture to this file (atomically) instead of stdout: .svg, or "
                   ".png (needs pip install 'napkin[plot]').")
@click.option("--plan", "planned", is_flag=True,
              help="Draw the plan: arrays coloured by memory level, kernels, loads, stores, "
                   "and the table of M and H per column.")
@click.option("--target", "target_name", default=None,
              help=f"Target to plan for (implies --plan; default {targets.DEFAULT}): "
                   + ", ".join(targets.names()) + ".")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE,...",
              help="Sizes of dynamic axes to plan for (implies --plan).")
@click.option("--group", "groups", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix group sizes at the block level (implies --plan): --group q=128.")
@click.option("--stream", "streams", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix the streamed axis and its chunk (implies --plan): --stream x=64.")
@click.option("--no-fusion", is_flag=True, help="Plan one kernel per equation (implies --plan).")
def command(diagram: str, sizes: dict[str, int], output: str | None, planned: bool,
            target_name: str | None, shapes, groups, streams, no_fusion: bool) -> None:
    """Draw a diagram as an SVG neural circuit diagram, read left to right."""
    fmt = picture_format(output, "-o", "svg")
    if fmt == "png":        # fail before any work when the picture cannot be written
        from ..draw import png
        png.require()
    d = load_diagram(diagram, sizes)
    if planned or target_name or shapes or groups or streams or no_fusion:
        from ..compiler.plan import plan
        overrides = {"group": parse_assignments(groups, "--group"),
                     "stream": parse_assignments(streams, "--stream")}
        p = plan(d, targets.load(target_name or targets.DEFAULT),
                 parse_assignments(shapes, "--shape"), overrides, fusion=not no_fusion)
        svg = draw_plan(p)
    else:
        svg = draw(d)
    if output:
        write_atomic(output, png.svg_to_png(svg) if fmt == "png" else svg)
    else:
        click.echo(svg, nl=False)
