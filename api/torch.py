"""PyTorch custom ops from compiled diagrams: `napkin.torch.op(kernel, "napkin::attention")`.

The op has a fake (shape-only) implementation, the reference executor as its
CPU kernel and the compiled CUDA kernel on GPUs, so it works under
torch.compile and with `torch.library.opcheck`. Importing this module imports
PyTorch; `import napkin` does not.
"""

from __future__ import annotations

import torch

from .kernel import Kernel

_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def op(kernel: Kernel, qualname: str):
    """Register `kernel` as the custom op `qualname` ("namespace::name"); returns the op."""
    diagram = kernel.diagram
    ins, outs = diagram.inputs, diagram.outputs
    args = ", ".join(f"Tensor a{i}" for i in range(len(ins)))
    result = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    torch.library.define(qualname, f"({args}) -> {result}")
    reference = Kernel(diagram, kernel.options, backend="reference")
    gpu = {}

    def single(got: tuple):
        """A kernel returns a tuple; the op's schema has one Tensor for one output."""
        return got[0] if len(outs) == 1 else got

    def on_cpu(*tensors):
        return single(reference(*tensors))

    def on_cuda(*tensors):
        if "kernel" not in gpu:
            gpu["kernel"] = kernel if kernel.backend == "cuda" else \
                Kernel(diagram, kernel.options, backend="cuda")
        return single(gpu["kernel"](*tensors))

    def fake(*tensors):
        dims = _dims(diagram, tensors)
        made = [tensors[0].new_empty([dims[a] for a in s.axes], dtype=_TORCH[s.dtype]) for s in outs]
        return made[0] if len(made) == 1 else tuple(made)

    torch.library.impl(qualname, "cpu")(on_cpu)
    torch.library.impl(qualname, "cuda")(on_cuda)
    torch.library.register_fake(qualname)(fake)
    namespace, name = qualname.split("::")
    return getattr(getattr(torch.ops, namespace), name).default


def _dims(diagram, tensors) -> dict:
    """Every axis's size, from the inputs' shapes (symbolic under fake tensors)."""
    axes = diagram.ir.graph["axes"]
    by_rep = {}
    for sig, t in zip(diagram.inputs, tensors):
        for a, n in zip(sig.axes, t.shape):
            by_rep.setdefault(axes[a].rep, n)
    return {a: info.size if info.size is not None else by_rep.get(info.rep) for a, info in axes.items()}
