"""Checking a kernel call's arrays against its signature, before anything is launched.

CuPy validates no kernel arguments (a Python float goes in as a double, a
torch tensor as garbage), so every argument is checked here: dtype, shapes
consistent per axis and with static sizes, contiguity, device, alignment, and
no output overlapping an input; a gather along an axis of size 0 is the reference's N0407
(`check_gathers`: the emitted CUDA clamps a position to the nearest row, and an empty axis has
none). Each problem is a NapkinLaunchError naming the
argument and what was expected. `check_fits` refuses (N0310) a call whose outputs would not
fit in the machine's memory, before anything is allocated.
"""

from __future__ import annotations

import os

from ..compiler import ir
from ..compiler.diagram import Diagram
from ..diagrams.diagnostics import Diagnostic, NapkinError, NapkinLaunchError, error
from .arrays import ArrayInfo, describe
from .bind import bind_sizes


def launch_error(message: str, help: str | None = None) -> NapkinLaunchError:
    return NapkinLaunchError(Diagnostic("N0903", message, help=help))


def check_inputs(diagram: Diagram, given: dict, device_required: bool) -> tuple[dict, dict]:
    """(ArrayInfo per input, size of every axis), or NapkinLaunchError."""
    infos = {}
    devices = set()
    for sig in diagram.inputs:
        x = given[sig.name]
        info = describe(x)
        if info is None:
            raise launch_error(f"input `{sig.name}` is a {type(x).__name__}, not an array",
                               help="pass a NumPy or CuPy array or a PyTorch tensor")
        if info.dtype != sig.dtype:
            raise launch_error(f"input `{sig.name}` has dtype {info.dtype_text}; the kernel was "
                               f"compiled for {sig.dtype}", help=f"convert it to {sig.dtype} first")
        if not info.contiguous:
            raise launch_error(f"input `{sig.name}` is not contiguous (strides {info.strides} for "
                               f"shape {info.shape})", help="pass a contiguous copy (.contiguous() "
                               "or ascontiguousarray)")
        if device_required and info.device is None:
            raise launch_error(f"input `{sig.name}` is in host memory; this kernel runs on the GPU",
                               help="move it to the GPU (cupy.asarray or .cuda())")
        if info.ptr % info.itemsize:
            raise launch_error(f"input `{sig.name}` starts at address {info.ptr:#x}, not aligned to "
                               f"{info.itemsize} bytes", help="pass an aligned (freshly allocated) array")
        devices.add(info.device)
        infos[sig.name] = info
    if len(devices - {None}) > 1:
        raise launch_error(f"inputs are on different devices ({sorted(d for d in devices if d is not None)})",
                           help="put every input on one GPU")
    try:
        sizes = bind_sizes(diagram, {n: i.shape for n, i in infos.items()})
    except NapkinError as exc:
        raise NapkinLaunchError(exc.diagnostics) from None
    check_gathers(diagram, sizes)
    return infos, sizes


def check_gathers(diagram: Diagram, sizes: dict) -> None:
    """N0407 at a gather that reads at least one point along a computed position whose axis
    has size 0 (an embedding table of no rows): every position is outside it, which the
    reference refuses, and the emitted kernels' clamp to the nearest row has no row to read
    (it read before the array's start, on the GPU and the emulator)."""
    from .gathers import array_name
    g = diagram.ir
    for n in g.nodes:
        op = ir.op(g, n)
        if not isinstance(op, ir.Gather) or 0 in (sizes.get(a) for a in ir.type_of(g, n).axes):
            continue
        base = ir.operands(g, n)[0]
        for k, (label, axis) in enumerate(zip(op.labels, ir.type_of(g, base).axes)):
            if label is None and sizes.get(axis) == 0:
                raise error("N0407", f"dimension {k} of `{array_name(g, base)}` is read at "
                            f"computed positions along its axis `{axis}`, of size 0: every "
                            "position is outside it",
                            g.nodes[n]["span"], help=f"give `{array_name(g, base)}` at least "
                            f"one entry along `{axis}`",
                            source=g.graph["source"])


def check_outputs(diagram: Diagram, out, shapes: dict, inputs: dict[str, ArrayInfo]) -> list:
    """The caller's preallocated outputs (`out=`), checked; returns them in output order."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    sigs = diagram.outputs
    if len(outs) != len(sigs):
        raise launch_error(f"out= has {len(outs)} arrays, but the diagram has {len(sigs)} outputs",
                           help="pass one array per output, in declaration order")
    for sig, o in zip(sigs, outs):
        info = describe(o)
        if info is None:
            raise launch_error(f"out= for `{sig.name}` is a {type(o).__name__}, not an array",
                               help="pass a NumPy or CuPy array or a PyTorch tensor")
        if info.shape != shapes[sig.name]:
            raise launch_error(f"out= for `{sig.name}` has shape {info.shape}; expected "
                               f"{shapes[sig.name]}", help=f"allocate it with shape "
                               f"{shapes[sig.name]} ({' '.join(sig.axes) or 'a scalar'})")
        if info.dtype != sig.dtype:
            raise launch_error(f"out= for `{sig.name}` has dtype {info.dtype_text}; expected "
                               f"{sig.dtype}", help=f"allocate it as {sig.dtype}, the output's "
                               "dtype in the diagram")
        if not info.contiguous:
            raise launch_error(f"out= for `{sig.name}` is not contiguous",
                               help="pass a freshly allocated (row-major, contiguous) array")
        for name, i in inputs.items():
            if overlaps(info, i):
                raise launch_error(f"out= for `{sig.name}` overlaps input `{name}`",
                                   help="outputs must not alias inputs; pass a separate array")
    return outs


def overlaps(a: ArrayInfo, b: ArrayInfo) -> bool:
    if a.device != b.device or not a.nbytes or not b.nbytes:
        return False
    return a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes


def memory_bytes() -> int | None:
    """This machine's physical memory, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits(what: str, arrays: list[tuple[str, tuple[str, ...], tuple[int, ...], int]],
               limit: int | None = None) -> None:
    """N0310 before anything is allocated when `arrays` ((name, axes, shape, itemsize) each)
    would not fit in memory together; the message names the largest array and its axes."""
    limit = memory_bytes() if limit is None else limit
    sizes = [(itemsize * _product(shape), name, axes, shape) for name, axes, shape, itemsize in arrays]
    total = sum(s[0] for s in sizes)
    if limit is None or total <= limit or not sizes:
        return
    nbytes, name, axes, shape = max(sizes)
    dims = ", ".join(f"{a}={n:,}" for a, n in zip(axes, shape))
    raise error("N0310", f"{what} need {_bytes(total)}, more than this machine's memory "
                f"({_bytes(limit)}); the largest is `{name}` ({dims}: {_bytes(nbytes)})",
                help="use smaller sizes for " + ", ".join(f"`{a}`" for a in axes))


def _product(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _bytes(n: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"
