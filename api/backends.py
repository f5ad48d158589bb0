"""The one backend registry: where a diagram runs (`napkin.compile`, `napkin.run`, `napkin run
--backend`). Light on purpose: the CLI imports it at start-up."""

from __future__ import annotations

from .diagrams.diagnostics import UsageError, did_you_mean, error

BACKENDS = {
    "auto": "cuda when CuPy sees a GPU, else reference",
    "cuda": "the emitted CUDA on the GPU, through CuPy",
    "reference": "the float64 reference rounded to the storage dtypes: the meaning",
    "interpret": "the plan with NumPy, block by block and chunk by chunk",
    "emulate": "the emitted CUDA on the CPU emulator",
}


def check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise UsageError(error("N0808", f"unknown backend `{backend}`",
                               help=did_you_mean(backend, list(BACKENDS),
                                                 "backends: " + ", ".join(BACKENDS)))
                         .diagnostics)
    return backend
