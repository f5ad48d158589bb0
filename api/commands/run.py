"""`napkin run FILE|NAME`: run a diagram on inputs from an .npz file or on random data."""

from __future__ import annotations

import hashlib
import zipfile

import click
import numpy as np

from ..cli_common import REPORT_URL, diagram_options, engine_option, load_diagram, parse_assignments
from ..compiler import target as targets
from ..diagrams.diagnostics import UsageError, did_you_mean, error
from ..backends import BACKENDS, check_backend
from ..runtime import compare, dtypes
from ..runtime.files import save_npz


@click.command("run")
@diagram_options
@click.option("--backend", default="reference", show_default=True,
              help="Where to run: " + "; ".join(f"{k} ({v})" for k, v in BACKENDS.items()) + ".")
@click.option("--target", "target_name", default=None,
              help="Target the interpret, emulate and cuda backends plan for (default: the "
                   "GPU's, else " + targets.DEFAULT + ").")
@engine_option
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False), default=None,
              help=".npz file whose keys are the input names.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE,...",
              help="Sizes of dynamic axes for random inputs: --shape q=128,x=96.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--save", "save_path", type=click.Path(dir_okay=False), default=None,
              help="Save the outputs to this .npz file, keyed by output name.")
@click.option("--check", is_flag=True,
              help="Also compare each output with the float64 reference under the tolerance "
                   "rule and print its error and budget (exit 101 if one breaks it: a bug).")
def command(diagram, sizes, backend, target_name, engine, inputs_path, shapes, seed, save_path,
            check) -> None:
    """Run a diagram and print each output's shape and checksum."""
    from ..api import run
    check_backend(backend)
    d = load_diagram(diagram, sizes)
    if inputs_path:
        if shapes:
            raise UsageError(error("N0804", "--shape is for random inputs; --inputs gives the "
                                   "shapes already", help="drop --shape").diagnostics)
        inputs = read_inputs(inputs_path, [s.name for s in d.inputs])
    else:
        inputs = random_inputs(d, parse_assignments(shapes, "--shape"), seed)
    outputs = run(d, backend=backend, target=target_name, engine=engine, **inputs)
    named = {s.name: out for s, out in zip(d.outputs, outputs)}
    verdicts = compare.against_reference(d, inputs, named) if check else {}
    for name, out in named.items():
        click.echo(describe(name, out))
        if name in verdicts:
            v = verdicts[name]
            click.echo(f"  {'matches' if v.ok else 'DOES NOT MATCH'} the float64 reference: "
                       + v.message.split(": ", 1)[1])
    if save_path:
        save_npz(save_path, named)
    if not all(v.ok for v in verdicts.values()):
        click.echo(f"error: the {backend} backend does not match the float64 reference: this is "
                   f"a bug in napkin; please report it at {REPORT_URL} with the diagram and "
                   "command", err=True)
        raise click.exceptions.Exit(101)


def describe(name: str, out: np.ndarray) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
    total = float(np.sum(out.astype(np.float64)))
    dtype = dtypes.name_of(out.dtype) or str(out.dtype)
    return f"{name}  shape={tuple(out.shape)}  dtype={dtype}  sum={total:.9g}  sha256={digest}"


def read_inputs(path: str, names: list[str]) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise error("N0806", f"cannot read inputs from {path}: {exc}",
                    help="give an .npz file written by numpy.savez") from None
    unknown = [k for k in arrays if k not in names]
    if unknown:
        raise error("N0806", f"{path} has arrays the diagram does not take: {', '.join(unknown)}",
                    help=did_you_mean(unknown[0], names, "inputs: " + ", ".join(names)))
    missing = [n for n in names if n not in arrays]
    if missing:
        raise error("N0806", f"{path} lacks input{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(missing)}", help="its keys must be the input names: " + ", ".join(names))
    return arrays


def random_inputs(d, shape: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Standard normal inputs in their storage dtypes; dynamic sizes from `shape`."""
    axes = d.ir.graph["axes"]
    for name in shape:
        if name not in axes:
            raise UsageError(error("N0804", f"--shape names `{name}`, which is not an axis",
                                   help=did_you_mean(name, axes, "axes: " + ", ".join(axes)))
                             .diagnostics)
    by_class = {}
    for name, size in shape.items():
        info = axes[name]
        if info.size is not None and info.size != size:
            raise UsageError(error("N0804", f"--shape {name}={size}, but `{name}` is {info.size} "
                                   "in the diagram", help=f"use -D {name}={size} to change it")
                             .diagnostics)
        by_class[info.rep] = size
    needed = sorted({a for s in d.inputs for a in s.axes
                     if axes[a].size is None and axes[a].rep not in by_class})
    if needed:
        raise error("N0805", "random inputs need the size of " + ", ".join(f"`{a}`" for a in needed),
                    help="give them with --shape " + ",".join(f"{a}=N" for a in needed)
                    + ", or pass --inputs FILE.npz")
    rng = np.random.default_rng(seed)
    out = {}
    for s in d.inputs:
        dims = tuple(axes[a].size if axes[a].size is not None else by_class[axes[a].rep]
                     for a in s.axes)
        out[s.name] = rng.standard_normal(dims).astype(dtypes.numpy_dtype(s.dtype))
    return out
