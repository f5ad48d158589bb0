"""The kernel program: what the templates print, with every decision already made.

A `Program` is a list of `KernelProgram`s launched in order. Each kernel
program lists its parameters, how to size its launch from the runtime sizes,
its shared-memory layout, and a body of statements. Statements are small
frozen dataclasses; expressions are C text built in Python from generated
identifiers and numbers only (no name from the diagram ever reaches them).
New operations (tensor-core fragments, asynchronous copies, pipelines) are
new statement kinds here and new cases in the template, not a second
generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field


# --- statements ----------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    """`#line N` back to the diagram."""
    line: int


@dataclass(frozen=True)
class Decl:
    ctype: str
    name: str
    init: str | None = None
    count: int | None = None          # an array of `count` elements
    shape: tuple[int, ...] = ()       # or a multi-dimensional array (tensor-core fragments)


@dataclass(frozen=True)
class Set:
    target: str
    value: str


@dataclass(frozen=True)
class For:
    """for (ctype var = start; cond; update) { body }; start "": `for (; cond; update)`, var
    declared before"""
    var: str
    start: str
    cond: str
    update: str
    body: tuple
    unroll: bool | int = False     # True: `#pragma unroll`; a count n: `#pragma unroll n`
    ctype: str = "int"


@dataclass(frozen=True)
class If:
    cond: str
    body: tuple
    orelse: tuple = ()


@dataclass(frozen=True)
class Continue:
    """if (cond) continue; -- the same for every thread of the block where barriers follow."""
    cond: str


@dataclass(frozen=True)
class Barrier:
    """__syncthreads(): every thread of the block reaches it (loops around it are uniform)."""


@dataclass(frozen=True)
class Store:
    ptr: str
    index: str
    value: str
    ctype: str
    convert: str = "napkin_from_float"   # napkin_from_int for an integer array


@dataclass(frozen=True)
class Call:
    """fn(args...); -- a prelude helper (tensor-core fragments: ldmatrix, mma)."""
    fn: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """A braced scope."""
    body: tuple


Stmt = Line | Decl | Set | For | If | Continue | Barrier | Store | Block | Call


# --- kernels -------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    name: str                 # generated: p0, p1, ... n0, n1, ...
    ctype: str                # "const __half* __restrict__", "long long", ...
    role: str                 # load | store | size
    array: str = ""           # which diagram array (for metadata and errors, never emitted)
    dims: tuple[str, ...] = ()  # axes of the array, in layout order


@dataclass(frozen=True)
class SharedBuffer:
    name: str
    ctype: str
    offset: str               # byte offset in the dynamic shared memory (C expression)
    count: str                # elements (C expression)


@dataclass(frozen=True)
class KernelProgram:
    name: str                          # generated: napkin_k0 ...
    params: tuple[Param, ...]
    threads: int                       # blockDim.x
    blocks: tuple[tuple[str, int], ...]    # (size param or static size, tile) per grouped axis
    smem_bytes_formula: tuple          # ((param or None, factor), ...): bytes = sum of terms
    smem: tuple[SharedBuffer, ...]
    body: tuple
    index_type: str                    # "int" or "long long"
    kernel: str = ""                   # the plan's kernel name (k0 ...)
    wgmma: tuple = ()                  # the wgmma instructions it issues (wgmma_ptx.Variant):
                                       # their helpers follow the prelude; its dynamic shared
                                       # memory is 1024-byte aligned (NAPKIN_WGMMA_SMEM)
    parts: tuple = ()                  # sibling products in one launch (codegen/launch.py):
                                       # (blocks, smem_bytes_formula) of each, the grid their
                                       # blocks' sum, the shared memory the largest's

    def smem_bytes(self, sizes: dict[str, int], align: int = 16) -> int:
        """Dynamic shared memory for these runtime sizes: every buffer aligned to `align`."""
        return max(_smem(f, sizes, align) for f in
                   ([p[1] for p in self.parts] or [self.smem_bytes_formula]))

    def tiles(self, sizes: dict[str, int]) -> int:
        """The blocks the kernel covers for these runtime sizes (the launch's grid, capped)."""
        return sum(_tiles(b, sizes) for b in ([p[0] for p in self.parts] or [self.blocks]))


def _smem(formula, sizes: dict[str, int], align: int) -> int:
    total = 0
    for term in formula:
        value = term[0]
        for name in term[1:]:
            value *= sizes[name]
        total = -(-total // align) * align + value
    return total


def _tiles(blocks, values: dict[str, int]) -> int:
    """Tiles along each grouped axis, multiplied; a size may be a product `n2*n3` (packed
    rows, codegen/lower.py) or a literal."""
    out = 1
    for size, tile in blocks:
        n = 1
        for s in size.split("*"):
            n *= values[s] if s in values else int(s.rstrip("L"))
        out *= -(-n // tile)
    return out


@dataclass(frozen=True)
class Program:
    kernels: tuple[KernelProgram, ...]
    size_params: tuple[tuple[str, str], ...]     # (param name, axis) for every runtime size
    buffers: tuple[tuple[str, str, tuple[str, ...]], ...] = field(default=())
    # (array name, storage dtype, axes) of every global array: inputs, intermediates, outputs
    alignment: int = 16
    zeroed: tuple[str, ...] = ()
    # arrays the launchers fill with zeros before the first kernel (a last-block merge's
    # counters, codegen/tail.py, which its last blocks set back to zero)
    # bytes every pointer argument is aligned to: the 16-byte cp.async copies of the tensor-
    # core kernels rely on it, so the kernels test sizes, never addresses; the launchers stage
    # an array the caller gives at another address through an aligned copy
    specialised: tuple[tuple[str, int], ...] = ()
    held: tuple[tuple[str, int], ...] = ()
    pitches: tuple[tuple[str, int], ...] = ()
    # (array name, values) of the intermediates whose rows the launchers allocate padded to a
    # multiple of `values` (compiler/pitch.py; runtime/launches.buffer_shape)
    # (axis, planned size) of the dynamic axes a CUDA-core kernel holds per-thread register
    # arrays over, walked in the planned trips (compiler/register_arrays.py): the launchers
    # refuse larger sizes
    # (axis, size) of the diagram's dynamic axes the plan fixed (compiler/specialise.py): the
    # launchers refuse other sizes; the CUDA header prints the sizes (not the user's names)
