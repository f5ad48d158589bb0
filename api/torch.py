"""PyTorch custom ops from compiled diagrams: `napkin.torch.op(kernel, "napkin::attention")`.

The op has a fake (shape-only) implementation, the reference executor as its
CPU kernel and the compiled CUDA kernel on GPUs, so it works under
torch.compile and with `torch.library.opcheck`. It is differentiable: its backward
is the op `<qualname>_backward` made the same way from `napkin.grad` of the
diagram (registered with `torch.library.register_autograd`), so `loss.backward()`
through it works. Where the diagram has a softmax, the backward is FlashAttention's:
the op `<qualname>_statistics` (`napkin.statistics`: the forward with each softmax's row
logsumexp) and then the saved gradient (`napkin.grad(..., saved=True)`), which recomputes
the probabilities blockwise instead of storing them. Importing this module imports PyTorch; `import napkin` does not.
"""

from __future__ import annotations

import torch

from .kernel import Kernel

_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
          "i32": torch.int32, "i64": torch.int64}


def op(kernel: Kernel, qualname: str, differentiable: bool = True):
    """Register `kernel` as the custom op `qualname` ("namespace::name"); returns the op.

    With `differentiable` (and a floating-point input some output depends on), the gradient
    diagram is compiled with the same options and backend and registered as its backward.
    """
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
        made = _outputs_like(diagram, tensors)
        return made[0] if len(made) == 1 else tuple(made)

    torch.library.impl(qualname, "cpu")(on_cpu)
    torch.library.impl(qualname, "cuda")(on_cuda)
    torch.library.register_fake(qualname)(fake)
    namespace, name = qualname.split("::")
    registered = getattr(getattr(torch.ops, namespace), name).default
    if differentiable:
        _register_backward(kernel, qualname)
    return registered


def _register_backward(kernel: Kernel, qualname: str) -> None:
    from .compiler.statistics import saved_sources
    from .diagrams.diagnostics import NapkinError
    from .gradient import grad, statistics
    diagram = kernel.diagram
    try:
        sources = saved_sources(diagram)
        backward_diagram = grad(diagram, saved=bool(sources))
    except NapkinError:         # nothing differentiable: the op stays without a backward
        return
    backward = op(Kernel(backward_diagram, kernel.options, backend=kernel.backend),
                  f"{qualname}_backward", differentiable=False)
    # FlashAttention's backward: the softmaxes' row logsumexps (and the attention output)
    # from the statistics kernel, the forward again with them as extra outputs (O(N) memory),
    # then the probabilities recomputed blockwise, never an N x N array
    stats = None
    if sources:
        stats_diagram = statistics(diagram)
        stats = op(Kernel(stats_diagram, kernel.options, backend=kernel.backend),
                   f"{qualname}_statistics", differentiable=False)
        produced = [s.name for s in stats_diagram.outputs]
        picks = [produced.index(source) for _, source in sources]
    names = [s.name for s in diagram.inputs]
    wrt = [names.index(s.name[1:]) if s.name[1:] in names else None for s in backward_diagram.outputs]

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward_fn(ctx, *cotangents):
        inputs = ctx.saved_tensors
        outs = [c.contiguous() if c is not None else torch.zeros_like(o) for c, o in
                zip(cotangents, _outputs_like(diagram, inputs))]
        extra = []
        if stats is not None:
            made = stats(*inputs)
            made = (made,) if not isinstance(made, tuple) else made
            extra = [made[i] for i in picks]
        got = backward(*inputs, *outs, *extra)
        got = (got,) if not isinstance(got, tuple) else got
        grads = [None] * len(inputs)
        for g, i in zip(got, wrt):
            grads[i] = g
        return tuple(grads)

    torch.library.register_autograd(qualname, backward_fn, setup_context=setup_context)


def _outputs_like(diagram, tensors) -> list:
    """Empty tensors of the outputs' shapes and dtypes (symbolic under fake tensors)."""
    dims = _dims(diagram, tensors)
    return [tensors[0].new_empty([dims[a] for a in s.axes], dtype=_TORCH[s.dtype]) for s in diagram.outputs]


def _dims(diagram, tensors) -> dict:
    """Every axis's size, from the inputs' shapes (symbolic under fake tensors)."""
    axes = diagram.ir.graph["axes"]
    by_rep = {}
    for sig, t in zip(diagram.inputs, tensors):
        for a, n in zip(sig.axes, t.shape):
            by_rep.setdefault(axes[a].rep, n)
    return {a: info.size if info.size is not None else by_rep.get(info.rep) for a, info in axes.items()}
