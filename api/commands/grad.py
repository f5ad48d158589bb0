"""`napkin grad FILE|NAME [--wrt Q,K] [--saved] [-o OUT.napkin]`: print the backward diagram."""

from __future__ import annotations

import click

from ..cli_common import OUTPUT, diagram_options, load_diagram
from ..runtime.files import check_output, write_atomic


@click.command("grad")
@diagram_options
@click.option("--wrt", default=None, metavar="NAMES",
              help="Comma-separated inputs to differentiate (default: every floating-point input "
                   "an output depends on).")
@click.option("--saved", is_flag=True,
              help="Take each softmax's row logsumexp (and the attention output) from the forward "
                   "instead of recomputing them, as FlashAttention's backward does.")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write the diagram to this file (atomically) instead of stdout.")
def command(diagram, sizes, wrt, saved, output) -> None:
    """Derive the gradient of a diagram and print it as a diagram (checked, ready to compile)."""
    from ..gradient import grad
    check_output(output, reads=[("the diagram", diagram)])
    d = load_diagram(diagram, sizes)      # (which prints its warnings)
    g = grad(d, wrt=wrt, saved=saved)
    OUTPUT.warn(g.warnings)
    if output is not None:
        write_atomic(output, g.source.text)
    else:
        click.echo(g.source.text, nl=False)
