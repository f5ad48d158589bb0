"""`napkin bench FILE|NAME --shape ...`: correctness, then timings against baselines (GPU only)."""

from __future__ import annotations

import csv
import io
import json

import click

from ..cli_common import diagram_options, engine_option, parse_assignments
from ..runtime.files import check_apart, check_output, write_atomic


@click.command("bench")
@diagram_options
@click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE,...", required=True,
              help="Sizes of the dynamic axes: --shape b=4,h=16,q=4096,x=4096.")
@click.option("--dtype", type=click.Choice(["f32", "f16", "bf16"]), default=None,
              help="Store every input and output in this dtype.")
@click.option("--baseline", type=click.Choice(["auto", "sdpa", "cublas", "none"]), default="auto",
              show_default=True, help="What to time beside napkin.")
@click.option("--reps", type=int, default=15, show_default=True, help="Timed runs (median).")
@click.option("--target", "target_name", default=None,
              help="Target to plan for (default: the GPU's).")
@engine_option
@click.option("--csv", "csv_path", type=click.Path(), default=None)
@click.option("--json", "json_path", type=click.Path(), default=None,
              help="Records (kernel, source, seconds, flops, bytes, ...) for napkin explain --bench.")
def command(diagram, sizes, shapes, dtype, baseline, reps, target_name, engine, csv_path,
            json_path) -> None:
    """Check a compiled diagram on the GPU, then time it beside PyTorch/cuBLAS baselines."""
    from ..bench import bench, variant
    from ..pipeline import Options
    options = Options.make(target=target_name, engine=engine)
    check_output(json_path, reads=[("the diagram", diagram)])
    check_output(csv_path, reads=[("the diagram", diagram)])
    check_apart({"--json": json_path, "--csv": csv_path})
    from ..runtime.cuda import gpu_present, unavailable
    if not gpu_present():
        raise unavailable("napkin bench needs an NVIDIA GPU that CuPy can see")
    shape = parse_assignments(shapes, "--shape")
    d = variant(diagram, dtype, **sizes)
    result = bench(d, shape, name=diagram if "/" not in diagram else d.name, baseline=baseline,
                   reps=reps, options=options)
    for name, v in result["correct"].items():
        click.echo(f"check {name}: {'ok' if v['ok'] else 'WRONG'} ({v['message']})")
    click.echo(f"{'source':<12} {'seconds':>12} {'TFLOP/s':>9} {'GB/s':>9} {'predicted':>12}")
    for r in result["records"]:
        pred = f"{r['predicted_seconds']:.4g}" if r["predicted_seconds"] else ""
        tf = f"{r['tflops']:.1f}" if r["tflops"] else "-"
        gb = f"{r['gbps']:.0f}" if r["gbps"] else "-"
        click.echo(f"{r['source']:<12} {r['seconds']:>12.4g} {tf:>9} {gb:>9} {pred:>12}")
    if json_path is not None:
        write_atomic(json_path, json.dumps(result["records"], indent=2))
    if csv_path is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=sorted({k for r in result["records"] for k in r}))
        writer.writeheader()
        writer.writerows(result["records"])
        write_atomic(csv_path, buf.getvalue())
    if not all(v["ok"] for v in result["correct"].values()):
        raise SystemExit(1)
