"""`napkin run FILE|NAME`: run a diagram on inputs from an .npz file or on random data."""

from __future__ import annotations

import hashlib

import click
import numpy as np

from ..cli_common import (LANES_HELP, REPORT_URL, SPLIT_HELP, diagram_options, engine_option,
                          load_diagram, merge_option, parse_assignments)
from ..compiler import ir
from ..compiler import target as targets
from ..compiler.shape_option import by_size_class
from ..diagrams.diagnostics import UsageError, did_you_mean, error
from ..backends import BACKENDS, check_backend
from ..runtime import compare, dtypes
from ..runtime.checks import check_fits
from ..runtime.files import check_output, save_npz
from ..runtime.npyfiles import load_arrays
from ..saved_inputs import saved_inputs, statistics_for


# the probabilistic budget of --check on napkin's random inputs fails a right result with
# probability at most this (runtime/bound.py: `spread`, `lam_for`)
CONFIDENCE = 1e-6


@click.command("run")
@diagram_options
@click.option("--backend", default="reference", show_default=True,
              help="Where to run: " + "; ".join(f"{k} ({v})" for k, v in BACKENDS.items()) + ".")
@click.option("--target", "target_name", default=None,
              help="Target the interpret, emulate and cuda backends plan for (default: the "
                   "GPU's, else " + targets.DEFAULT + ").")
@engine_option
@click.option("--group", "groups", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix group sizes at the block level: --group q=128.")
@click.option("--stream", "streams", multiple=True, metavar="AXIS=SIZE,...",
              help="Fix the streamed axis and its chunk: --stream x=64.")
@click.option("--split", "splits", multiple=True, metavar="[ARRAY:]AXIS=COUNT",
              help=SPLIT_HELP)
@click.option("--lanes", "lanes", multiple=True, metavar="AXIS=COUNT", help=LANES_HELP)
@merge_option
@click.option("--inputs", "inputs_path", type=click.Path(), default=None,
              help=".npz file whose keys are the input names.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=SIZE,...",
              help="Sizes of dynamic axes for random inputs: --shape q=128,x=96.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--save", "save_path", type=click.Path(), default=None,
              help="Save the outputs to this .npz file, keyed by output name.")
@click.option("--check", is_flag=True,
              help="Also compare each output with the float64 reference under the tolerance "
                   "rule (its sums held to the order the backend's plan computes them in) and "
                   "print its error and budget (exit 101 if one breaks it: a bug).")
def command(diagram, sizes, backend, target_name, engine, groups, streams, splits, lanes,
            merge, inputs_path, shapes, seed, save_path, check) -> None:
    """Run a diagram and print each output's shape and checksum."""
    from ..api import prepare_run
    check_backend(backend)
    if seed < 0:       # (NumPy's generators take no negative seed: it crashed, exit 101)
        raise UsageError(error("N0804", f"--seed {seed}: a seed is a whole number of at least 0",
                               help="for example --seed 3").diagnostics)
    check_output(save_path, reads=[("the diagram", diagram), ("the --inputs file", inputs_path)])
    d = load_diagram(diagram, sizes)
    saved = saved_inputs(d)       # a saved gradient's statistics of its forward
    random_saved = ()
    if inputs_path:
        if shapes:
            raise UsageError(error("N0804", "--shape is for random inputs; --inputs gives the "
                                   "shapes already", help="drop --shape").diagnostics)
        inputs = read_inputs(inputs_path, d)
    else:
        inputs = random_inputs(d, parse_assignments(shapes, "--shape"), seed)
        stats = statistics_for(d, inputs) if saved else None
        if stats:
            inputs.update(stats)
        elif saved:
            random_saved = saved
            click.echo(f"warning: {_names(saved)} are random, not the statistics of the "
                       "other inputs: napkin found no forward whose saved gradient this is "
                       "(its first line names the forward)", err=True)
    kernel, arrays = prepare_run(d, (), inputs, backend=backend, target=target_name,
                                 engine=engine, group=parse_assignments(groups, "--group"),
                                 stream=parse_assignments(streams, "--stream"),
                                 split=parse_assignments(splits, "--split"), merge=merge,
                                 lanes=parse_assignments(lanes, "--lanes"))
    outputs = kernel(**arrays)
    named = {s.name: out for s, out in zip(d.outputs, outputs)}
    verdicts, worst = {}, {}
    if check:       # held to the order the backend summed in: its plan's, or float64's
        planned = kernel.backend != "reference"
        order = dict(plan=kernel.plan if planned else None, longest=None if planned else 0)
        verdicts = worst = compare.against_reference(d, inputs, named, **order)
        if not inputs_path and not random_saved:   # napkin's own random inputs
            verdicts = compare.against_reference(d, inputs, named, confidence=CONFIDENCE,
                                                 **order)
    for name, out in named.items():
        click.echo(describe(name, out))
        if name in verdicts:
            v, w = verdicts[name], worst[name]
            click.echo(f"  {'matches' if v.ok and w.ok else 'DOES NOT MATCH'} the float64 "
                       "reference: " + v.message.split(": ", 1)[1])
            if f"{v.budget:.3g}" != f"{w.budget:.3g}":   # (as printed: equal ones say nothing)
                click.echo(f"  (a probabilistic budget: a right result breaks it with "
                           f"probability at most {CONFIDENCE:g}; the worst case of the "
                           f"rounding errors allows {w.budget:.3g})")
    if save_path is not None:
        save_npz(save_path, named)
    if not all(v.ok for v in verdicts.values()) or not all(w.ok for w in worst.values()):
        if random_saved:
            click.echo(f"error: the outputs do not match the float64 reference on inconsistent "
                       f"inputs: {_names(random_saved)} are random, not the forward's statistics "
                       "of the other inputs, so the probabilities the gradient recomputes from "
                       "them are not probabilities (they may overflow); give consistent ones "
                       "with --inputs (napkin.statistics of the forward computes them)", err=True)
            raise click.exceptions.Exit(1)
        held = _non_finite(d, inputs)
        # (only a plan that leaves masked terms out explains it: else a NaN out of place is one)
        skips = kernel.backend != "reference" and any(
            kp.leaves_masked_terms_out for kp in kernel.plan.kernels)
        if held and skips and all(v.ok or " in different places " in v.message
                                  for v in verdicts.values()):
            click.echo(f"error: the outputs' NaN or inf are not where the float64 reference's "
                       f"are, and {_names(held)} {'hold' if len(held) > 1 else 'holds'} NaN or inf: a term a mask makes 0 (a "
                       "probability of 0 times a NaN value) is NaN in the reference, while the "
                       "kernels skip whole masked chunks, as FlashAttention does, and leave such "
                       "terms out (docs/language.md, NaN); give finite inputs to check the "
                       "values", err=True)
            raise click.exceptions.Exit(1)
        unless = (f" (unless {_names(saved)} in the --inputs file are not the forward's "
                  "statistics of its other inputs)") if saved else ""
        if all(w.ok for w in worst.values()):
            unless += (f" (or, with probability at most {CONFIDENCE:g}, rounding errors as "
                       "unlucky as the worst case allows)")
        click.echo(f"error: the {kernel.backend} backend does not match the float64 reference: "
                   f"this is a bug in napkin{unless}; please report it at {REPORT_URL} with the "
                   "diagram and command", err=True)
        raise click.exceptions.Exit(101)


def _non_finite(d, inputs: dict) -> list[str]:
    """The floating-point inputs holding a NaN or an infinity."""
    held = []
    for s in d.inputs:
        a = np.asarray(inputs[s.name])
        if a.dtype.kind not in "biu" and not np.isfinite(a.astype(np.float64)).all():
            held.append(s.name)
    return held


def _names(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def describe(name: str, out: np.ndarray) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
    with np.errstate(invalid="ignore"):     # +inf and -inf sum to nan, printed as such
        total = float(np.sum(out.astype(np.float64)))
    dtype = dtypes.name_of(out.dtype) or str(out.dtype)
    return f"{name}  shape={tuple(out.shape)}  dtype={dtype}  sum={total:.9g}  sha256={digest}"


def read_inputs(path: str, d) -> dict[str, np.ndarray]:
    """The arrays of an .npz file keyed by input name (or, for a diagram with one input, an
    .npy file), their headers checked before anything is read: each array's size against the
    language's limit and against the bytes the file holds for it. bf16 arrays, which .npy
    stores as raw 2-byte patterns (|V2, as --save writes them), are read back as bf16."""
    names = [s.name for s in d.inputs]
    arrays = load_arrays(path, names)
    unknown = [k for k in arrays if k not in names]
    if unknown:
        raise error("N0806", f"{path} has arrays the diagram does not take: {', '.join(unknown)}",
                    help=did_you_mean(unknown[0], names, "inputs: " + ", ".join(names)))
    missing = [n for n in names if n not in arrays]
    if missing:
        raise error("N0806", f"{path} lacks input{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(missing)}", help="its keys must be the input names: " + ", ".join(names))
    declared = {s.name: s.dtype for s in d.inputs}
    for name, arr in arrays.items():
        if arr.dtype.kind == "V" and arr.dtype.itemsize == 2 and declared[name] == "bf16":
            arrays[name] = arr.view(dtypes.numpy_dtype("bf16"))
    return arrays


def random_inputs(d, shape: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Standard normal inputs in their storage dtypes (integers: uniform in the range the
    diagram reads them in, `ranges`, else below the smallest axis size and 8; booleans: fair
    coins); dynamic sizes from `shape`."""
    axes = d.ir.graph["axes"]
    by_class = {rep: size for rep, (size, _) in by_size_class(axes, shape).items()}
    needed = sorted({a for s in d.inputs for a in s.axes
                     if axes[a].size is None and axes[a].rep not in by_class})
    if needed:
        raise error("N0805", "random inputs need the size of " + ", ".join(f"`{a}`" for a in needed),
                    help="give them with --shape " + ",".join(f"{a}=N" for a in needed)
                    + ", or pass --inputs FILE.npz")
    dims = {s.name: tuple(axes[a].size if axes[a].size is not None else by_class[axes[a].rep]
                          for a in s.axes) for s in d.inputs}
    # (made in float64, then stored: 8 bytes an element while one input is being made)
    check_fits("the random inputs", [(s.name, s.axes, dims[s.name], 8) for s in d.inputs])
    rng = np.random.default_rng(seed)
    # integers below every axis's size: in range as labels or as positions along any axis
    # (an integer input the diagram only reads as a position along an axis, or compares with
    # an axis's position, instead spans that axis: `ranges`)
    high = max(1, min([v for d_ in dims.values() for v in d_] + [a.size for a in axes.values()
                                                                   if a.size is not None] + [8]))
    size = {a: info.size if info.size is not None else by_class.get(info.rep)
            for a, info in axes.items()}
    spans = ranges(d.ir, size)
    return {s.name: _random(rng, s.dtype, dims[s.name], spans.get(s.name, high))
            for s in d.inputs}


LABELS = 8      # distinct labels drawn for an integer only compared with another
# a comparison of an integer with an axis's position: the integers that make it vary (a
# length `x < len[b]` up to the axis's size, a label `v == label[t]` below it)
_COMPARED = {"lt": 1, "le": 1, "gt": 1, "ge": 1, "eq": 0, "ne": 0}


def ranges(g, size: dict) -> dict[str, int]:
    """integer input -> the bound below which `random_inputs` draws it, where every use the
    diagram makes of it is one it can bound: read (through views and gathers of it) as a
    gather's position along an axis (below the axis's size), or compared with an axis's
    position (up to its size), also after a shift by positions, sizes and constants (`x <=
    len[b] - size(q) + q`: up to the size plus the largest shift). An input used any other way (in arithmetic, as a value) has
    none: the common bound then keeps it in range whatever it indexes."""
    out = {}
    for n in g.nodes:
        inp = ir.op(g, n)
        if not isinstance(inp, ir.Input) or ir.kind_of_dtype(ir.type_of(g, n).dtype) != "int":
            continue
        found = _bounds(g, n, size)
        if found:
            out[inp.name] = max(1, min(found))
    return out


def _source(g, n: int):
    """The integer input whose values node n reads unchanged (through views and gathers of
    it), or None."""
    while isinstance(ir.op(g, n), (ir.View, ir.Gather)):
        n = ir.operands(g, n)[0]
    ok = isinstance(ir.op(g, n), ir.Input) and ir.kind_of_dtype(ir.type_of(g, n).dtype) == "int"
    return n if ok else None


def _bounds(g, n: int, size: dict) -> list | None:
    """The bounds of every use of node n's values (None where one has none)."""
    found = []
    for u in g.successors(n):
        o, args = ir.op(g, u), ir.operands(g, u)
        for slot in (k for k, a in enumerate(args) if a == n):
            if isinstance(o, ir.View) or isinstance(o, ir.Gather) and slot == 0:
                more = _bounds(g, u, size)           # the same values, moved
            elif isinstance(o, ir.Gather):
                axes = ir.type_of(g, args[0]).axes
                along = [axes[k] for k, label in enumerate(o.labels) if label is None]
                more = [size.get(along[slot - 1])]
            elif isinstance(o, ir.Map) and o.fn in _COMPARED and len(args) == 2 and \
                    isinstance(ir.op(g, args[1 - slot]), ir.Index):
                axis = ir.op(g, args[1 - slot]).axis
                more = [size[axis] + _COMPARED[o.fn]] if size.get(axis) is not None else None
            elif isinstance(o, ir.Map) and o.fn in _COMPARED and len(args) == 2 and \
                    _source(g, args[1 - slot]) is not None:
                more = [LABELS]       # labels compared with labels (`doc[q] == doc[x]`)
            elif isinstance(o, ir.Map) and o.fn in ("add", "sub") and len(args) == 2 and \
                    _largest(g, args[1 - slot], size) is not None:
                # shifted by positions, sizes or constants (`x <= len[b] - size(q) + q`): the
                # shifted values' bounds, widened by the largest shift
                shift = _largest(g, args[1 - slot], size)
                within = _bounds(g, u, size)
                more = None if within is None else [b + shift for b in within]
            else:
                more = None
            if more is None or None in more:
                return None
            found += more
    return found


def _largest(g, n: int, size: dict) -> int | None:
    """The largest magnitude node n takes where it reads no input (an axis's position, a
    size, a constant, their sums, differences and products), else None."""
    o, args = ir.op(g, n), ir.operands(g, n)
    if isinstance(o, ir.Index):
        return None if size.get(o.axis) is None else max(size[o.axis] - 1, 0)
    if isinstance(o, ir.SizeOf):
        return size.get(o.axis)
    if isinstance(o, ir.Const):
        v = o.value
        return int(abs(v)) if np.isfinite(v) else None
    if isinstance(o, (ir.Assign, ir.View)) and len(args) == 1:
        return _largest(g, args[0], size)
    if isinstance(o, ir.Map) and o.fn in ("add", "sub", "mul", "neg"):
        found = [_largest(g, a, size) for a in args]
        if None in found:
            return None
        return int(np.prod(found)) if o.fn == "mul" else sum(found)
    return None


def _random(rng, dtype: str, dims: tuple, high: int) -> np.ndarray:
    if dtype == "bool":
        return rng.random(dims) < 0.5
    if dtype in ("i32", "i64"):
        return rng.integers(0, high, dims).astype(dtypes.numpy_dtype(dtype))
    return rng.standard_normal(dims).astype(dtypes.numpy_dtype(dtype))
