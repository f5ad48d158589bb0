"""`run`: compile CUDA C for the CPU emulator, run launches on NumPy buffers."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from .. import trusted
from .build import SANITIZER_FLAGS, build
from .errors import bad_arguments
from .process import run_emulator
from .spec import Launch, Param, check_signatures, read_buffers, threads, write_spec

# launches over this many threads (all blocks) are built at -O1, fewer at -O0 (build.flags_for)
OPTIMIZE_ABOVE_THREADS = 8192


def run(source: str, signatures: dict[str, tuple[Param, ...]], launches: list[Launch],
        buffers: dict[str, np.ndarray], *, sanitize: str = "none", smem_limit: int = 232448,
        timeout_s: float = 120.0, workers: int = 2) -> dict[str, np.ndarray]:
    """Run `launches` of the kernels in `source` (CUDA C) on the CPU, in order.

    The source is compiled with g++ against the emulator header (cached), and runs
    in a separate process, so a crash, a sanitizer report or a hang raises
    `EmulatorError` here instead of taking the caller down. Returns every buffer
    after the launches, as new arrays with the same dtypes and shapes.

    sanitize: "none", "address" (AddressSanitizer + UndefinedBehaviorSanitizer) or
    "thread" (ThreadSanitizer: races between threads, e.g. a missing __syncthreads).
    smem_limit: the most dynamic shared memory a launch may ask for, in bytes.
    workers: OS threads that share the blocks of a launch.
    """
    if sanitize not in SANITIZER_FLAGS:
        raise bad_arguments(f"sanitize must be one of {', '.join(SANITIZER_FLAGS)}, not {sanitize!r}")
    if not isinstance(source, str):
        raise bad_arguments("source must be a str of CUDA C")
    if not isinstance(workers, int) or workers < 1:
        raise bad_arguments(f"workers must be a positive int, not {workers!r}")
    if not isinstance(smem_limit, int) or smem_limit < 0:
        raise bad_arguments(f"smem_limit must be a non-negative int, not {smem_limit!r}")
    check_signatures(signatures)
    launches = list(launches)
    # -O0 where the build is most of the cost: launches of few threads (checks, tests)
    binary = build(source, signatures, sanitize, optimize=threads(launches) > OPTIMIZE_ABOVE_THREADS)
    try:    # beside the binary (a trusted folder); a full one: this process's private folder
        folder = Path(tempfile.mkdtemp(prefix="run-", dir=binary.parent))
    except OSError:
        folder = Path(tempfile.mkdtemp(prefix="run-", dir=trusted.private_dir("emulator")))
    try:
        spec = folder / "spec.txt"
        files = write_spec(spec, folder, signatures, launches, buffers, workers=workers,
                           smem_limit=smem_limit)
        run_emulator(binary, folder, spec, timeout_s)
        return read_buffers(files, buffers)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
