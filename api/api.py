"""The Python API: `napkin.load` and `napkin.run`."""

from __future__ import annotations

from .compiler import pipeline
from .compiler.diagram import Diagram
from .diagrams.diagnostics import did_you_mean, error
from .runtime import backends
from .runtime.bind import bind_sizes, match_inputs, to_numpy


def _picture(diagram: Diagram) -> str:
    """The diagram as a picture, for Jupyter."""
    from .draw import draw
    return draw(diagram)


# Jupyter shows a diagram as its picture; pictures are presentation, so they are attached
# here, above the compiler that defines the type.
Diagram._repr_svg_ = _picture


def load(diagram, **sizes: int) -> Diagram:
    """Parse and check a diagram: a path, a library name (`"attention"`) or its text.

    Keyword arguments fix or override axis sizes, like `-D d=128` on the command line.
    """
    if isinstance(diagram, Diagram):
        if not sizes:
            return diagram
        merged = {**dict(diagram.overrides), **sizes}
        return pipeline.check(pipeline.parse(diagram.source), merged)
    return pipeline.load(diagram, **sizes)


def compile(diagram, target: str | None = None, arch: str | None = None, backend: str = "auto",
            tensor_cores: bool = True, **sizes: int):
    """Compile a diagram into a `Kernel` you call on arrays: `napkin.compile("attention")(Q, K, V)`.

    `target` and `arch` default to the GPU's when there is one; `backend` is "auto"
    (the GPU when CuPy sees one, else the reference executor), "cuda", "reference",
    "interpret" or "emulate". `tensor_cores=False` keeps every contraction on the CUDA
    cores. Keyword arguments fix axis sizes (`d=64`).
    """
    from .kernel import Kernel
    return Kernel(load(diagram, **sizes), target=target, arch=arch, backend=backend,
                  tensor_cores=tensor_cores)


def run(diagram, *arrays, backend: str = "reference", **named) -> tuple:
    """Run a diagram on arrays; returns a tuple of outputs in declaration order.

    Inputs go positionally in declaration order or by name; other keyword
    arguments naming axes fix their sizes (`d=128`).
    """
    fn = backends.get(backend)
    d = load(diagram)
    input_names = {s.name for s in d.inputs}
    sizes = {k: v for k, v in named.items() if k not in input_names}
    for key in sizes:
        if key not in d.axes:
            raise error("N0309", f"`{key}` is neither an input nor an axis of the diagram",
                        help=did_you_mean(key, list(input_names) + list(d.axes),
                                          "inputs: " + ", ".join(sorted(input_names))))
    if sizes:
        d = load(d, **sizes)
    given = match_inputs(d, arrays, {k: v for k, v in named.items() if k in input_names})
    inputs = {name: to_numpy(name, value) for name, value in given.items()}
    bound = bind_sizes(d, {name: a.shape for name, a in inputs.items()})
    out = fn(d, inputs, bound)
    return tuple(out[s.name] for s in d.outputs)
