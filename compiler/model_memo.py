"""Kernel models memoised on the graph's contents: fusion asks for the model of the same
candidate kernel again and again, from planners of equal problems (KernelPlanner._model)."""

from __future__ import annotations

from collections import OrderedDict

from .graph import DiGraph

from .columns import columns
from .kernels import FusedKernel
from .model import axis_free, kernel_model


_MODELS: OrderedDict = OrderedDict()     # (graph token, kernel, axis) -> (model, columns)
_MAX_MODELS = 4096
_AXIS_FREE: OrderedDict = OrderedDict()   # (graph token, kernel) -> model.axis_free's answer


def _shared_model(g: DiGraph, graph: int | None, k: FusedKernel, axis: str | None):
    """kernel_model and columns of kernel k, memoised on the graph's contents (`graph`: its
    fingerprint.token; None: not memoised) and what the model reads of the kernel."""
    key = (graph, k.nodes, k.loads, k.stores, axis)
    found = _MODELS.get(key) if graph is not None else None
    if found is None:
        shared = None
        if graph is not None:         # (the kernel's other axes' models share these)
            shared = _AXIS_FREE.get(key[:-1])
            if shared is None:
                shared = _AXIS_FREE[key[:-1]] = axis_free(g, k)
                if len(_AXIS_FREE) > _MAX_MODELS:
                    _AXIS_FREE.popitem(last=False)
        model = kernel_model(g, k, axis, shared)
        found = (model, columns(g, model))
        if graph is not None:
            _MODELS[key] = found
            if len(_MODELS) > _MAX_MODELS:
                _MODELS.popitem(last=False)
    else:
        _MODELS.move_to_end(key)
    return found
