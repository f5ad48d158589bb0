"""`napkin explain FILE|NAME`: the plan napkin derives, in the paper's notation or as JSON.

`--plot FILE.png` also draws each kernel's predicted point on the target's roofline (needs
matplotlib: `pip install 'napkin[plot]'`), `--bench FILE.json` adds measured points from
`napkin bench --json` (see api/draw/roofline.py for the format).
"""

from __future__ import annotations

import json

import click

from ..cli_common import diagram_options, load_diagram, parse_assignments, picture_format
from ..compiler import target as targets
from ..explain import render_text, report
from ..compiler.plan import plan
from ..diagrams.diagnostics import UsageError, error
from ..runtime.files import write_atomic


@click.command("explain")
@diagram_options
@click.option("--target", "target_name", default=targets.DEFAULT, show_default=True,
              help="Target: " + ", ".join(targets.names()) + " (two-level:M=BYTES sets M).")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE,...",
              help="Sizes of dynamic axes to plan for (default: %d)." % 1024)
@click.option("--group", "groups", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix group sizes at the block level: --group q=128.")
@click.option("--stream", "streams", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix the streamed axis and its chunk: --stream x=64.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-fusion", is_flag=True, help="Plan one kernel per equation.")
@click.option("--tensor-cores/--no-tensor-cores", default=True, show_default=True,
              help="Run eligible matrix products on mma.sync tensor cores.")
@click.option("--arch", default=None,
              help="Also compile with NVRTC for this arch and show ptxas's report beside the plan "
                   "(default: the target's arch, when NVRTC is installed).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Draw the kernels on the target's roofline into this PNG "
                   "(needs pip install 'napkin[plot]').")
@click.option("--bench", "bench_path", type=click.Path(dir_okay=False), default=None,
              help="Add measured points to --plot from napkin bench --json results.")
def command(diagram, sizes, target_name, shapes, groups, streams, as_json, no_fusion,
            tensor_cores, arch, plot_path, bench_path) -> None:
    """Explain the plan: kernels, relabelled axes, memory per level, M, H, FLOPs and time."""
    bench = None
    if bench_path and not plot_path:
        raise UsageError(error("N0804", "--bench adds measured points to the roofline: it needs "
                               "--plot", help="for example --plot roofline.png --bench b.json")
                         .diagnostics)
    fmt = picture_format(plot_path, "--plot", "png")
    if plot_path:   # fail before any work when the plot cannot be drawn
        from ..draw import roofline
        roofline.require()
        bench = roofline.read_bench(bench_path) if bench_path else None
    d = load_diagram(diagram, sizes)
    tgt = targets.load(target_name)
    overrides = {"group": parse_assignments(groups, "--group"),
                 "stream": parse_assignments(streams, "--stream")}
    p = plan(d, tgt, parse_assignments(shapes, "--shape"), overrides, fusion=not no_fusion,
             tensor_cores=tensor_cores)
    rep = report(p)
    attach_resources(rep, p, arch or (tgt.arch if tgt.arch.startswith("sm_") else None), arch)
    click.echo(json.dumps(rep, indent=2) if as_json else render_text(rep))
    if plot_path:
        write_atomic(plot_path, roofline.picture(rep, tgt, bench, fmt))


def attach_resources(rep: dict, p, arch: str | None, asked: str | None) -> None:
    """ptxas's registers, spills and shared memory per kernel, when NVRTC is at hand."""
    from ..codegen.lower import lower
    from ..codegen.render import render
    from ..runtime import nvrtc
    if arch is None or (asked is None and not nvrtc.available()):
        return
    prog = lower(p)
    compiled = nvrtc.compile(render(prog), arch=arch)
    sizes = {param: p.sizes[axis] for param, axis in prog.size_params}
    for k, kp in zip(rep["kernels"], prog.kernels):
        r = compiled.resources[kp.name]
        k["resources"] = {"arch": arch, "registers": r.registers, "spill_stores": r.spill_stores,
                          "spill_loads": r.spill_loads, "stack_bytes": r.stack_bytes,
                          "smem_bytes": r.smem_bytes + kp.smem_bytes(sizes)}
