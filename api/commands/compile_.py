"""`napkin compile FILE|NAME --emit KIND [-o OUT]`: print any stage's artifact."""

from __future__ import annotations

import sys

import click

from ..cli_common import OUTPUT, diagram_options, parse_assignments
from ..compiler import target as targets
from ..pipeline import Options, emit_names, run_until
from ..runtime.files import write_atomic


@click.command("compile")
@diagram_options
@click.option("--emit", type=click.Choice(emit_names()), default="cuda", show_default=True,
              help="Which stage's artifact to print.")
@click.option("--target", "target_name", default=targets.DEFAULT, show_default=True,
              help="Target to plan for: " + ", ".join(targets.names()) + ".")
@click.option("--arch", default="sm_90", show_default=True,
              help="GPU architecture for ptx/cubin (sm_80, sm_86, sm_89, sm_90, sm_90a, ...).")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE,...",
              help="Sizes of dynamic axes to plan for.")
@click.option("--group", "groups", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix group sizes at the block level.")
@click.option("--stream", "streams", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix the streamed axis and its chunk.")
@click.option("--tensor-cores/--no-tensor-cores", default=True, show_default=True,
              help="Run eligible matrix products on mma.sync tensor cores.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the artifact to this file (atomically) instead of stdout.")
def command(diagram, sizes, emit, target_name, arch, shapes, groups, streams, tensor_cores,
            output) -> None:
    """Compile a diagram and print the artifact of one stage (default: CUDA C)."""
    from ..runtime import nvrtc
    nvrtc.validate_arch(arch)     # even where the artifact does not use it: a typo is a typo
    options = Options(target=target_name, shape=tuple(sorted(parse_assignments(shapes, "--shape").items())),
                      groups=tuple(sorted(parse_assignments(groups, "--group").items())),
                      streams=tuple(sorted(parse_assignments(streams, "--stream").items())),
                      arch=arch, tensor_cores=tensor_cores)
    artifact, warnings = run_until(diagram, emit, sizes, options)
    OUTPUT.warn(warnings)
    if output:
        write_atomic(output, artifact)
    elif isinstance(artifact, bytes):
        sys.stdout.buffer.write(artifact)
        sys.stdout.buffer.flush()
    else:
        click.echo(artifact, nl=False)
