"""From a kernel program and concrete sizes to buffers and launches (any backend that runs CUDA).

Global buffers are named b0, b1, ...: the inputs in their storage dtypes, the
intermediates kernels hand to each other (f32) and the outputs, the last two
filled with NaN so that an element no kernel writes cannot go unnoticed.
Grids are capped (every kernel loops grid-stride over its blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..codegen import program as P
from ..compiler import register_arrays
from ..compiler.pitch import pitch_of
from ..diagrams.diagnostics import error
from . import dtypes

MAX_GRID = 2**31 - 1


@dataclass(frozen=True)
class LaunchSpec:
    kernel: str
    grid: int
    block: int
    smem_bytes: int
    args: tuple          # buffer name per array parameter, int per size parameter
    blocks: int          # tiles the kernel covers


def size_values(program: P.Program, sizes: dict[str, int]) -> dict[str, int]:
    """Size parameter name -> value, from the sizes of every axis."""
    return {param: int(sizes[axis]) for param, axis in program.size_params}


def buffer_names(program: P.Program) -> dict[str, str]:
    """Array name -> global buffer name."""
    return {array: f"b{i}" for i, (array, _, _) in enumerate(program.buffers)}


def buffer_shape(program: P.Program, array: str, axes, sizes: dict[str, int]) -> tuple:
    """The shape a launcher allocates global array `array` over `axes` in: its sizes, the last
    one its rows' pitch where the plan pads them (Program.pitches, compiler/pitch.py)."""
    shape = [int(sizes[a]) for a in axes]
    values = dict(program.pitches).get(array, 0)
    if shape and values:
        shape[-1] = pitch_of(shape[-1], values)
    return tuple(shape)


def make_buffers(program: P.Program, inputs: dict[str, np.ndarray], sizes: dict[str, int],
                 input_names) -> dict[str, np.ndarray]:
    names = buffer_names(program)
    out = {}
    for array, dtype, axes in program.buffers:
        np_dtype = dtypes.numpy_dtype(dtype)
        if array in input_names:
            out[names[array]] = np.asarray(inputs[array], order="C").astype(np_dtype, copy=False)
        elif array in program.zeroed:     # a last-block merge's counters (codegen/tail.py)
            out[names[array]] = np.zeros(tuple(int(sizes[a]) for a in axes), dtype=np_dtype)
        else:
            fill = np.nan if np_dtype.kind == "f" or np_dtype.name == "bfloat16" else \
                (0 if np_dtype.kind == "b" else np.iinfo(np_dtype).min)   # never computed
            # (a padded row's padding too: a kernel reading it would read NaN)
            out[names[array]] = np.full(buffer_shape(program, array, axes, sizes), fill,
                                        dtype=np_dtype)
    return out


def make_launches(program: P.Program, sizes: dict[str, int], max_grid: int = MAX_GRID,
                  smem_limit: int | None = None) -> list[LaunchSpec]:
    from ..compiler.specialise import check
    check(program.specialised, sizes)       # (N0308: a kernel built for other head sizes)
    register_arrays.check(program.held, sizes)     # (N0308: register arrays of fewer)
    names = buffer_names(program)
    values = size_values(program, sizes)
    launches = []
    for k in program.kernels:
        blocks = k.tiles(values)
        smem = k.smem_bytes(values)
        if smem_limit is not None and smem > smem_limit:
            raise error("N0603", f"kernel {k.kernel} needs {smem:,} bytes of shared memory for these "
                        f"sizes; the target allows {smem_limit:,}",
                        help="plan for these sizes (napkin.compile with the sizes), or stream the axis")
        args = []
        for p in k.params:
            args.append(values[p.name] if p.role == "size" else names[p.array])
        launches.append(LaunchSpec(k.name, max(1, min(blocks, max_grid)), k.threads, smem,
                                   tuple(args), blocks))
    return launches
