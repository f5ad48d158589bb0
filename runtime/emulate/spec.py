"""Kernel signatures and launches: their types, validation, and the spec file the
emulated process reads (see napkin_emulate_runtime.cpp, `host_main`)."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from .errors import bad_arguments

KINDS = ("ptr", "i32", "i64", "f32")

# Pointer element types: C spelling -> NumPy dtype of the buffer.
CTYPES: dict[str, np.dtype] = {
    "float": np.dtype(np.float32),
    "__half": np.dtype(np.float16),
    "__nv_bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int": np.dtype(np.int32),
    "unsigned int": np.dtype(np.uint32),
    "unsigned char": np.dtype(np.uint8),
    "long long": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
    "double": np.dtype(np.float64),
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: kind "ptr" | "i32" | "i64" | "f32"; ctype is the
    pointee type for "ptr" (a key of CTYPES) and ignored otherwise."""

    kind: str
    ctype: str = "float"
    const: bool = False


@dataclass(frozen=True)
class Launch:
    """One launch: `args` holds a buffer name (str) per "ptr" parameter and a
    Python int/float per scalar parameter."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    args: tuple


def check_signatures(signatures: dict[str, tuple[Param, ...]]) -> None:
    for name, params in signatures.items():
        if not isinstance(name, str) or not _IDENT.match(name):
            raise bad_arguments(f"kernel name {name!r} is not a C identifier")
        for i, p in enumerate(params):
            if not isinstance(p, Param) or p.kind not in KINDS:
                raise bad_arguments(f"{name}: parameter {i} is not a Param of kind {'/'.join(KINDS)}: {p!r}")
            if p.kind == "ptr" and p.ctype not in CTYPES:
                raise bad_arguments(f"{name}: parameter {i}: unsupported pointer type {p.ctype!r} "
                                    f"(one of {', '.join(CTYPES)})")


def _dim3(what: str, value) -> tuple[int, int, int]:
    if (not isinstance(value, tuple) or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 for v in value)):
        raise bad_arguments(f"{what} must be a tuple of three non-negative ints, not {value!r}")
    return value


def threads(launches) -> int:
    """The threads `launches` run over all their blocks (each launch checked as
    `launch_line` checks it)."""
    total = 0
    for launch in launches:
        if not isinstance(launch, Launch):
            raise bad_arguments(f"launches must hold Launch objects, not {launch!r}")
        gx, gy, gz = _dim3(f"{launch.kernel}: grid", launch.grid)
        bx, by, bz = _dim3(f"{launch.kernel}: block", launch.block)
        total += gx * gy * gz * bx * by * bz
    return total


def _scalar_token(kernel: str, i: int, param: Param, value) -> str:
    if param.kind == "f32":
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise bad_arguments(f"{kernel}: argument {i} (f32) must be a number, not {value!r}")
        bits = struct.unpack("<I", np.float32(value).tobytes())[0]
        return f"f{bits:08x}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise bad_arguments(f"{kernel}: argument {i} ({param.kind}) must be an int, not {value!r}")
    lo, hi = _INT_RANGE[param.kind]
    if not lo <= int(value) <= hi:
        raise bad_arguments(f"{kernel}: argument {i} ({param.kind}) = {value} is out of range")
    return ("i" if param.kind == "i32" else "l") + str(int(value))


def launch_line(launch: Launch, signatures, kernel_index: dict[str, int], buffers, buffer_index) -> str:
    """The spec-file line of one launch, after checking it against its signature."""
    if not isinstance(launch, Launch):
        raise bad_arguments(f"launches must hold Launch objects, not {launch!r}")
    name = launch.kernel
    if name not in signatures:
        raise bad_arguments(f"launch of {name!r}, which has no signature")
    params = signatures[name]
    grid, block = _dim3(f"{name}: grid", launch.grid), _dim3(f"{name}: block", launch.block)
    smem = launch.smem_bytes
    if isinstance(smem, bool) or not isinstance(smem, int) or smem < 0:
        raise bad_arguments(f"{name}: smem_bytes must be a non-negative int, not {smem!r}")
    if len(launch.args) != len(params):
        raise bad_arguments(f"{name} takes {len(params)} arguments, the launch gives {len(launch.args)}")
    tokens = []
    for i, (param, value) in enumerate(zip(params, launch.args)):
        if param.kind != "ptr":
            tokens.append(_scalar_token(name, i, param, value))
            continue
        if not isinstance(value, str) or value not in buffers:
            raise bad_arguments(f"{name}: argument {i} must name a buffer, not {value!r}")
        want, got = CTYPES[param.ctype], buffers[value].dtype
        if want != got:
            raise bad_arguments(f"{name}: argument {i} is {param.ctype}* but buffer {value!r} holds {got}")
        tokens.append(f"b{buffer_index[value]}")
    dims = " ".join(str(v) for v in (*grid, *block))
    return f"{kernel_index[name]} {dims} {smem} {len(tokens)} {' '.join(tokens)}".rstrip()


def write_spec(path: Path, folder: Path, signatures, launches, buffers, *, workers: int,
               smem_limit: int) -> dict[str, Path]:
    """Write the buffers (one file each) and the spec file; return buffer name -> file."""
    for name, arr in buffers.items():
        if not isinstance(arr, np.ndarray):
            raise bad_arguments(f"buffer {name!r} is not a numpy array")
        if arr.dtype not in CTYPES.values():
            raise bad_arguments(f"buffer {name!r} has unsupported dtype {arr.dtype}")
    kernel_index = {k: i for i, k in enumerate(signatures)}
    buffer_index = {b: i for i, b in enumerate(buffers)}
    files = {b: folder / f"buf{i}.bin" for b, i in buffer_index.items()}
    lines = ["napkin-emulator 1", f"workers {int(workers)} smem_limit {int(smem_limit)}",
             f"buffers {len(buffers)}"]
    for name, arr in buffers.items():
        np.ascontiguousarray(arr).tofile(files[name])
        lines.append(f"{arr.nbytes} {files[name].name}")  # the process runs in `folder`
    body = [launch_line(ln, signatures, kernel_index, buffers, buffer_index) for ln in launches]
    lines += [f"launches {len(body)}", *body]
    path.write_text("\n".join(lines) + "\n")
    return files


def read_buffers(files: dict[str, Path], buffers) -> dict[str, np.ndarray]:
    out = {}
    for name, arr in buffers.items():
        data = files[name].read_bytes()
        if len(data) != arr.nbytes:
            raise bad_arguments(f"buffer {name!r} came back with {len(data)} bytes, not {arr.nbytes}")
        out[name] = np.frombuffer(data, dtype=arr.dtype).reshape(arr.shape).copy()
    return out
