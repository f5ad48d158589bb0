"""`napkin compile FILE|NAME --emit KIND [-o OUT]`: print any stage's artifact."""

from __future__ import annotations

import sys

import click

from ..cli_common import OUTPUT, diagram_options, planning_options
from ..compiler import target as targets
from ..pipeline import emit, emit_names
from ..runtime.files import check_output, write_atomic


@click.command("compile")
@diagram_options
@click.option("--emit", "emit_name", type=click.Choice(emit_names()), default="cuda",
              show_default=True, help="Which stage's artifact to print.")
@planning_options(default_target=targets.DEFAULT,
                  arch="GPU architecture for ptx/cubin (sm_80, sm_86, sm_89, sm_90, sm_90a, ...; "
                       "default: the target's).")
@click.option("-o", "--output", type=click.Path(), default=None,
              help="Write the artifact to this file (atomically) instead of stdout (a device or FIFO is written as it is).")
def command(diagram, sizes, emit_name, options, planned, output) -> None:
    """Compile a diagram and print the artifact of one stage (default: CUDA C)."""
    check_output(output, reads=[("the diagram", diagram)])
    artifact, warnings = emit(diagram, emit_name, options)
    OUTPUT.warn(warnings)
    if output is not None:
        write_atomic(output, artifact)
    elif isinstance(artifact, bytes):
        sys.stdout.buffer.write(artifact)
        sys.stdout.buffer.flush()
    else:   # (a text artifact ends its last line on a terminal; -o writes it as it is)
        click.echo(artifact, nl=not artifact.endswith("\n"))
