"""Binding a call's arrays to a diagram: which input is which, and the size of every axis.

Checks, at run time, what only the arrays can tell: that every input is given
once, that ranks match, and that every axis has one size across all inputs and
agrees with its static size. Errors name the axis, both sizes and both places.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compiler import ir
from . import dtypes
from ..compiler.diagram import Diagram
from ..compiler.positions import check_exact
from ..diagrams import limits
from ..diagrams.diagnostics import Label, did_you_mean, error


@dataclass(frozen=True)
class Bound:
    arrays: dict[str, object]     # input name -> the caller's array (unconverted)
    sizes: dict[str, int]         # every axis -> its size for this call


def match_inputs(diagram: Diagram, args: tuple, named: dict) -> dict[str, object]:
    """Positional arrays in declaration order, plus named ones; each input exactly once."""
    sigs = diagram.inputs
    names = [s.name for s in sigs]
    if len(args) > len(names):
        raise error("N0309", f"{len(args)} arrays given, but the diagram has {len(names)} inputs "
                    f"({', '.join(names)})", help="pass one array per input, in declaration order")
    given = dict(zip(names, args))
    for key, value in named.items():
        if key not in names:
            raise error("N0309", f"the diagram has no input `{key}`",
                        help=did_you_mean(key, names, "inputs: " + ", ".join(names)))
        if key in given:
            raise error("N0309", f"input `{key}` is given twice (by position and by name)",
                        help="pass each input once")
        given[key] = value
    missing = [n for n in names if n not in given]
    if missing:      # (at the first missing input's declaration)
        g = diagram.ir
        raise error("N0309", f"missing input{'s' if len(missing) > 1 else ''}: {', '.join(missing)}",
                    g.nodes[g.graph["inputs"][missing[0]]]["span"],
                    help="inputs: " + ", ".join(f"{s.name}[{' '.join(s.axes)}]" for s in sigs),
                    source=g.graph["source"])
    return {n: given[n] for n in names}


def bind_sizes(diagram: Diagram, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The size of every axis, from static sizes and the inputs' shapes."""
    g = diagram.ir
    axes: dict[str, ir.Axis] = g.graph["axes"]
    by_class: dict[str, tuple[int, str, int]] = {}  # rep -> (size, input name, position)
    for sig in diagram.inputs:
        shape = tuple(shapes[sig.name])
        span = g.nodes[g.graph["inputs"][sig.name]]["span"]
        if len(shape) != len(sig.axes):
            raise error("N0308", f"input `{sig.name}` has {len(shape)} dimensions {shape}, but the "
                        f"diagram declares {len(sig.axes)} [{' '.join(sig.axes)}]", span,
                        help=f"pass an array of shape ({', '.join(sig.axes)})",
                        source=g.graph["source"])
        for pos, (axis, size) in enumerate(zip(sig.axes, shape)):
            info = axes[axis]
            src = g.graph["source"]
            if size > limits.MAX_SIZE:
                raise error("N0308", f"input `{sig.name}` has size {size:,} along axis `{axis}` "
                            f"(dimension {pos}), more than the limit {limits.MAX_SIZE:,} (2^40)",
                            span, help="sizes must fit in 64-bit index arithmetic", source=src)
            if info.size is not None and size != info.size:
                why = (f"`{axis}` is {info.size}" if info.rep == axis or axes[info.rep].size is None
                       else f"`{axis}` must equal `{info.rep}` = {info.size}")
                raise error("N0308", f"input `{sig.name}` has size {size} along axis `{axis}` "
                            f"(dimension {pos}), but {why}", span,
                            labels=[Label(info.span, "declared here")] if info.span else [],
                            help=f"pass an array whose dimension {pos} is {info.size}, or "
                                 f"recompile with -D {axis}={size}", source=src)
            seen = by_class.get(info.rep)
            if seen is not None and seen[0] != size:
                other, other_pos = seen[1], seen[2]
                other_axis = next(s for s in diagram.inputs if s.name == other).axes[other_pos]
                same = (f"axis `{axis}`" if other_axis == axis
                        else f"axes `{other_axis}` and `{axis}` (which the diagram makes equal)")
                raise error("N0308", f"inputs disagree on {same}: `{other}` has {seen[0]} "
                            f"(dimension {other_pos}) but `{sig.name}` has {size} "
                            f"(dimension {pos})", span,
                            help="every array must have the same size along one axis", source=src)
            by_class.setdefault(info.rep, (size, sig.name, pos))
    sizes = {}
    for name, info in axes.items():
        if info.size is not None:
            sizes[name] = info.size
        elif info.rep in by_class:
            sizes[name] = by_class[info.rep][0]
    check_exact(g.graph.get("exact", ()), sizes, source=g.graph["source"])
    return sizes


def to_numpy(name: str, value, declared: str | None = None) -> np.ndarray:
    """A caller's array as a NumPy array (CPU frameworks and GPU arrays with `.get()`), checked
    against the input's declared dtype when one is given (no float becomes an integer)."""
    if hasattr(value, "__cuda_array_interface__") and hasattr(value, "get"):
        value = value.get()
    elif hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except Exception as exc:  # any conversion failure is the caller's mistake
        raise error("N0405", f"input `{name}` is not an array ({type(value).__name__}): {exc}",
                    help="pass a NumPy array or anything np.asarray accepts") from None
    if arr.dtype.kind not in "fiub" and arr.dtype.name != "bfloat16":
        raise error("N0405", f"input `{name}` has dtype {arr.dtype}, which is not a real number type",
                    help="pass float arrays (f32, f16 or bf16)")
    if declared is not None:
        check_kind(name, arr, declared)
    return arr


def check_kind(name: str, arr: np.ndarray, declared: str) -> None:
    """N0405 unless the array's kind may become the declared dtype's: no float is ever taken
    for an integer input, nor a number for a boolean one, even when its values would fit."""
    if not dtypes.accepts(declared, arr.dtype):
        want = {"bool": "booleans (np.bool_)", "i32": "integers (np.int32)",
                "i64": "integers (np.int64)"}.get(declared, "numbers")
        raise error("N0405", f"input `{name}` is declared {declared}, but the array holds "
                    f"{arr.dtype}", help=f"pass {want}; napkin never converts floats to integers "
                    "or numbers to booleans silently (convert the array yourself, or change the "
                    "input's dtype in the diagram)")


def stored(name: str, arr: np.ndarray, dtype: str) -> np.ndarray:
    """`arr` in the input's declared dtype: as it is, or converted when the conversion is exact
    for every one of its values (f16 data held in f64, small integers, booleans); anything
    else is N0405, on every path (napkin.run, --inputs, compiled kernels)."""
    want = dtypes.numpy_dtype(dtype)
    if arr.dtype == want:
        return arr
    check_kind(name, arr, dtype)
    with np.errstate(all="ignore"):
        converted = arr.astype(want)
        back = converted.astype(arr.dtype)
        finite = np.isfinite(converted.astype(np.float64)) | ~np.isfinite(arr.astype(np.float64))
        # (a round trip keeps an unsigned 2^63 that became -2^63: the signs must agree too)
        same_sign = (converted < 0) == (arr < 0)
    exact = finite & same_sign & ((back == arr) | (np.isnan(arr.astype(np.float64))
                                                   & np.isnan(converted.astype(np.float64))))
    if not exact.all():
        where = tuple(int(i) for i in np.argwhere(~exact)[0])
        raise error("N0405", f"input `{name}` has dtype {arr.dtype}, and {dtype} cannot hold its "
                    f"value {arr[where].item()!r} at {where} exactly",
                    help=f"pass {dtype} data (napkin converts only when every value is kept "
                         f"exactly): for example .astype({want.name!r}) to round it yourself")
    return converted


def bind(diagram: Diagram, args: tuple, named: dict) -> Bound:
    arrays = match_inputs(diagram, args, named)
    shapes = {n: tuple(a.shape) if hasattr(a, "shape") else np.shape(a) for n, a in arrays.items()}
    return Bound(arrays, bind_sizes(diagram, shapes))
