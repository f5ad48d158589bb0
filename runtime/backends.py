"""Backends that execute a diagram on NumPy inputs: a name -> function registry.

Each backend takes (diagram, inputs by name, sizes) and returns the outputs by
name in their storage dtypes. The reference backend is the float64 oracle
rounded to the storage dtypes; later backends (the schedule interpreter, the
CPU emulator of the emitted CUDA, the GPU) register here too.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..compiler.diagram import Diagram
from ..diagrams.diagnostics import UsageError, did_you_mean, error
from . import dtypes, reference

Backend = Callable[[Diagram, dict, dict], dict]
_REGISTRY: dict[str, Backend] = {}


def register(name: str, fn: Backend) -> None:
    _REGISTRY[name] = fn


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> Backend:
    if name not in _REGISTRY:
        raise UsageError(error("N0808", f"unknown backend `{name}`",
                               help=did_you_mean(name, names(), "backends: " + ", ".join(names())))
                         .diagnostics)
    return _REGISTRY[name]


def _reference(diagram: Diagram, inputs: dict, sizes: dict) -> dict[str, np.ndarray]:
    out = reference.evaluate(diagram, inputs, sizes=sizes)
    return {s.name: out[s.name].astype(dtypes.numpy_dtype(s.dtype)) for s in diagram.outputs}


def _interpret(diagram: Diagram, inputs: dict, sizes: dict) -> dict[str, np.ndarray]:
    from ..compiler.plan import plan
    from .interpret import interpret
    out = interpret(plan(diagram, None, sizes), inputs)
    return {s.name: out[s.name].astype(dtypes.numpy_dtype(s.dtype)) for s in diagram.outputs}


def _emulate(diagram: Diagram, inputs: dict, sizes: dict) -> dict[str, np.ndarray]:
    from ..compiler.plan import plan
    from .emulated import run_plan
    out = run_plan(plan(diagram, None, sizes), inputs, sizes)
    return {s.name: out[s.name] for s in diagram.outputs}


register("reference", _reference)
register("interpret", _interpret)
register("emulate", _emulate)
