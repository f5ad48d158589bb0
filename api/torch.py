"""PyTorch custom ops from compiled diagrams: `napkin.torch.op(kernel, "napkin::attention")`.

The op has a fake (shape-only) implementation, the reference executor as its
CPU kernel and the compiled CUDA kernel on GPUs, so it works under
torch.compile and with `torch.library.opcheck`. It is differentiable: its backward
is the op `<qualname>_backward` made the same way from `napkin.grad` of the
diagram (registered with `torch.library.register_autograd`), so `loss.backward()`
through it works. Where the diagram has a softmax, the op is FlashAttention's: it runs
`<qualname>_statistics` (`napkin.statistics`: the forward with each softmax's row
logsumexp as an extra output, O(N) memory) and returns the diagram's outputs, keeping the
logsumexps for the backward, the saved gradient (`napkin.grad(..., saved=True)`), which
recomputes the probabilities blockwise instead of storing them or running the forward
again. Importing this module imports PyTorch; `import napkin` does not.
"""

from __future__ import annotations

import torch

from .kernel import Kernel

_DISCRETE = ("i32", "i64", "bool")       # dtypes with no gradient
_TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
          "i32": torch.int32, "i64": torch.int64}


def op(kernel: Kernel, qualname: str, differentiable: bool = True):
    """Register `kernel` as the custom op `qualname` ("namespace::name"); returns the op.

    With `differentiable` (and a floating-point input some output depends on), the gradient
    diagram is compiled with the same options and backend and registered as its backward.
    """
    diagram = kernel.diagram
    if differentiable:
        sources = _saved_sources(diagram)
        if sources:
            return _through_statistics(kernel, qualname, sources)
    outs = diagram.outputs
    torch.library.define(qualname, _schema(diagram))
    reference = Kernel(diagram, kernel.options, backend="reference")
    gpu = {}

    def single(got: tuple):
        """A kernel returns a tuple; the op's schema has one Tensor for one output."""
        return got[0] if len(outs) == 1 else got

    # a PyTorch op takes any strides (`q.transpose(1, 2)`, autograd's expanded cotangents):
    # kernels read row-major arrays, so the op hands them contiguous ones
    def on_cpu(*tensors):
        return single(reference(*(t.contiguous() for t in tensors)))

    def on_cuda(*tensors):
        if "kernel" not in gpu:
            gpu["kernel"] = kernel if kernel.backend == "cuda" else \
                Kernel(diagram, kernel.options, backend="cuda")
        return single(gpu["kernel"](*(t.contiguous() for t in tensors)))

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


def _schema(diagram) -> str:
    args = ", ".join(f"Tensor a{i}" for i in range(len(diagram.inputs)))
    outs = diagram.outputs
    return f"({args}) -> " + ("Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")")


def _saved_sources(diagram):
    """What the saved gradient takes from the statistics forward (none: no softmax, or
    nothing to differentiate)."""
    from .compiler.statistics import saved_sources
    from .diagrams.diagnostics import NapkinError
    try:
        return saved_sources(diagram)
    except NapkinError:
        return ()


def _gradient_op(kernel: Kernel, qualname: str, saved: bool):
    """The backward op and, per output it returns, the input it is the gradient of (None:
    nothing differentiable, the op has no backward)."""
    from .compiler.grad import differentiated
    from .diagrams.diagnostics import NapkinError
    from .gradient import grad
    diagram = kernel.diagram
    try:
        wrt = differentiated(diagram)
    except NapkinError:         # nothing differentiable: the op stays without a backward
        return None, None
    backward_diagram = grad(diagram, wrt=wrt, saved=saved)
    backward = op(Kernel(backward_diagram, kernel.options, backend=kernel.backend),
                  f"{qualname}_backward", differentiable=False)
    _once_only(f"{qualname}_backward")
    # the gradient's outputs follow wrt, whatever their names (`dX_` where the forward has a dX)
    names = [s.name for s in diagram.inputs]
    return backward, [names.index(w) for w in wrt]


def _once_only(qualname: str) -> None:
    """The backward op's own backward raises: without one, PyTorch only warns and treats it as
    constant, so a double backward (`create_graph=True`, a gradient penalty) would silently
    give no second-order term."""
    def backward_fn(ctx, *cotangents):
        raise NotImplementedError(
            f"{qualname}: napkin derives first gradients only; the gradient of a napkin op's "
            "backward (double backward, create_graph=True) is not supported")

    def setup_context(ctx, inputs, output):
        pass

    torch.library.register_autograd(qualname, backward_fn, setup_context=setup_context)


def _gradients(wrt, got, n_inputs: int) -> tuple:
    got = (got,) if not isinstance(got, tuple) else got
    grads = [None] * n_inputs
    for g, i in zip(got, wrt):
        grads[i] = g
    return tuple(grads)


def _cotangents(diagram, cotangents, inputs) -> list:
    """The gradient's cotangent inputs: one per floating-point output (an integer output
    passes no gradient back), zeros where autograd gives None."""
    return [c.contiguous() if c is not None else torch.zeros_like(o) for c, o, s in
            zip(cotangents, _outputs_like(diagram, inputs), diagram.outputs)
            if s.dtype not in _DISCRETE]


def _through_statistics(kernel: Kernel, qualname: str, sources):
    """FlashAttention's pair: the op `qualname` returns the first outputs of the
    differentiable op `<qualname>_statistics` (the forward with its row logsumexps, which
    autograd keeps), whose backward is the saved gradient."""
    from .gradient import statistics
    diagram = kernel.diagram
    stats_diagram = statistics(diagram)
    stats = op(Kernel(stats_diagram, kernel.options, backend=kernel.backend),
               f"{qualname}_statistics", differentiable=False)
    produced = [s.name for s in stats_diagram.outputs]
    picks = [produced.index(source) for _, source in sources]
    n_out = len(diagram.outputs)
    backward, wrt = _gradient_op(kernel, qualname, saved=True)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs, *(output[i] for i in picks))
        ctx.mark_non_differentiable(*output[n_out:])   # the logsumexps are internal

    def backward_fn(ctx, *cotangents):
        *inputs, = ctx.saved_tensors
        inputs, extra = inputs[:len(inputs) - len(picks)], inputs[len(inputs) - len(picks):]
        outs = _cotangents(diagram, cotangents[:n_out], inputs)
        return _gradients(wrt, backward(*inputs, *outs, *extra), len(inputs))

    torch.library.register_autograd(f"{qualname}_statistics", backward_fn,
                                    setup_context=setup_context)
    torch.library.define(qualname, _schema(diagram))

    def forward(*tensors):
        made = stats(*tensors)
        return made[0] if n_out == 1 else tuple(made[:n_out])

    torch.library.impl(qualname, "CompositeImplicitAutograd")(forward)
    namespace, name = qualname.split("::")
    return getattr(getattr(torch.ops, namespace), name).default


def _register_backward(kernel: Kernel, qualname: str) -> None:
    diagram = kernel.diagram
    backward, wrt = _gradient_op(kernel, qualname, saved=False)
    if backward is None:
        return

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward_fn(ctx, *cotangents):
        inputs = ctx.saved_tensors
        outs = _cotangents(diagram, cotangents, inputs)
        return _gradients(wrt, backward(*inputs, *outs), len(inputs))

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
