"""`napkin explain FILE|NAME`: the plan napkin derives, in the paper's notation or as JSON.

`--ptxas` (or `--arch`) also compiles the kernels with NVRTC and shows ptxas's registers,
spills and shared memory beside the plan; without it explain never loads NVRTC. `--plot
FILE.png` draws each kernel's predicted point on the target's roofline (needs matplotlib:
`pip install 'napkin[plot]'`), `--bench FILE.json` adds measured points from `napkin bench
--json` (see api/draw/roofline.py for the format).
"""

from __future__ import annotations

import json

import click

from ..cli_common import diagram_options, load_diagram, picture_format, planning_options
from ..compiler import target as targets
from ..diagrams.diagnostics import UsageError, error
from ..runtime.files import check_output, write_atomic


@click.command("explain")
@diagram_options
@planning_options(default_target=targets.DEFAULT,
                  arch="Compile with NVRTC for this arch and show ptxas's report (implies "
                       "--ptxas).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--ptxas", is_flag=True,
              help="Also compile with NVRTC (the target's arch) and show ptxas's registers, "
                   "spills and shared memory per kernel.")
@click.option("--plot", "plot_path", type=click.Path(), default=None,
              help="Draw the kernels on the target's roofline into this PNG "
                   "(needs pip install 'napkin[plot]').")
@click.option("--bench", "bench_path", type=click.Path(), default=None,
              help="Add measured points to --plot from napkin bench --json results.")
def command(diagram, sizes, options, planned, as_json, ptxas, plot_path, bench_path) -> None:
    """Explain the plan: kernels, relabelled axes, memory per level, M, H, FLOPs and time."""
    from .. import pipeline
    from ..explain import render_text, report
    bench = None
    if bench_path and not plot_path:
        raise UsageError(error("N0804", "--bench adds measured points to the roofline: it needs "
                               "--plot", help="for example --plot roofline.png --bench b.json")
                         .diagnostics)
    check_output(plot_path, reads=[("the diagram", diagram),
                                        ("the --bench file", bench_path)])
    fmt = picture_format(plot_path, "--plot", "png")
    if plot_path:   # fail before any work when the plot cannot be drawn
        from ..draw import roofline
        roofline.require()
        bench = roofline.read_bench(bench_path) if bench_path else None
    d = load_diagram(diagram, sizes)
    p = pipeline.plan(d, options)
    rep = report(p)
    if ptxas or options.arch:
        attach_resources(rep, p, options)
    click.echo(json.dumps(rep, indent=2) if as_json else render_text(rep))
    if plot_path:
        write_atomic(plot_path, roofline.picture(rep, p.target, bench, fmt))


def attach_resources(rep: dict, p, options) -> None:
    """ptxas's registers, spills and shared memory per kernel (NVRTC, through the cache)."""
    from .. import pipeline
    made = pipeline.through(p, "plan", "binary", options)
    prog, binary = made["program"], made["binary"]
    sizes = {param: p.sizes[axis] for param, axis in prog.size_params}
    by_name = {kp.kernel: kp for kp in prog.kernels}
    for k in rep["kernels"]:
        kp = by_name.get(k["name"])
        if kp is None:      # a merge run by the partial kernel's last blocks: ptxas reports
            continue        # the partial kernel, which holds it
        r = binary.resources[kp.name]
        k["resources"] = {"arch": binary.arch, "registers": r["registers"],
                          "spill_stores": r["spill_stores"], "spill_loads": r["spill_loads"],
                          "stack_bytes": r["stack_bytes"],
                          "smem_bytes": r["smem_bytes"] + kp.smem_bytes(sizes)}
        k["resources"].update(recheck(p, k, r["registers"]))


def recheck(p, k: dict, registers: int) -> dict:
    """The plan's occupancy re-checked with ptxas's registers in place of the estimate."""
    from ..compiler.occupancy import LIMITS, blocks_per_sm
    smem = k["levels"][0]["M_bytes"] if p.target.processors else 0
    per_sm, which = blocks_per_sm(p.target, smem, k["threads_per_block"], registers)
    return {"blocks_per_sm": int(per_sm), "occupancy_limit": LIMITS[int(which)]}
