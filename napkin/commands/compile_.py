"""`napkin compile FILE|NAME --emit KIND [-o OUT]`: print any stage's artifact."""

from __future__ import annotations

import click

from ..cli_common import diagram_options, load_diagram
from ..compiler import pipeline
from ..diagrams import sources
from ..runtime.files import write_atomic


@click.command("compile")
@diagram_options
@click.option("--emit", type=click.Choice(pipeline.emit_names()), default="ir", show_default=True,
              help="Which stage's artifact to print.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the artifact to this file (atomically) instead of stdout.")
def command(diagram: str, sizes: dict[str, int], emit: str, output: str | None) -> None:
    """Compile a diagram and print the artifact of one stage."""
    if emit == "ast":
        text = pipeline.STAGES[0].show(pipeline.parse(sources.resolve(diagram)))
    else:
        d = load_diagram(diagram, sizes)
        stage = next(s for s in pipeline.STAGES if s.name == emit)
        text = stage.show(d)
    if output:
        write_atomic(output, text)
    else:
        click.echo(text, nl=False)
