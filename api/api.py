"""The Python API: `napkin.load` and `napkin.run`."""

from __future__ import annotations

from .compiler import front
from .compiler.diagram import Diagram
from .diagrams.diagnostics import did_you_mean, error


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
    return front.load(diagram, **sizes)


def compile(diagram, target: str | None = None, arch: str | None = None, backend: str = "auto",
            engine: str = "auto", group: dict | None = None, stream: dict | None = None,
            fusion: bool = True, save_for_backward: bool = False, split: dict | None = None,
            merge: str = "auto", lanes: dict | None = None, **sizes: int):
    """Compile a diagram into a `Kernel` you call on arrays: `napkin.compile("attention")(Q, K, V)`
    returns the tuple of outputs, as `napkin.run` does.

    `target` and `arch` default to the GPU's when there is one; `backend` is "auto"
    (the GPU when CuPy sees one, else the reference executor), "cuda", "reference",
    "interpret" or "emulate". `engine` is "auto" (the planner chooses per kernel),
    "tensor-cores" (every kernel with a contraction on mma.sync, or N0606 saying why one
    cannot) or "cuda-cores". `group={"q": 128}` and `stream={"x": 64}` are schedule hints,
    as `--group`/`--stream` on the command line; `split={"x": 8}` splits a reduced axis
    across 8 blocks and merges their partial states (`--split x=8`; by default the planner
    splits where it predicts a gain); `lanes={"c": 256}` splits a reduced axis over 256 of a
    block's lanes (8 warps: shuffles in each warp, then the warps through shared memory;
    `--lanes c=256`); `merge` says where a split's partial states merge:
    "kernel" (a kernel of their own), "last-block" (the partial kernel's last block of each
    output tile, `--merge last-block`) or "auto" (the faster by the model). Other keyword
    arguments fix axis sizes
    (`d=64`). `save_for_backward=True` compiles `napkin.statistics(diagram)`: the outputs, then
    each softmax's row logsumexp, which `napkin.grad(diagram, saved=True)` reads.
    """
    from .backends import check_backend
    from .kernel import Kernel
    from .pipeline import Options
    check_backend(backend)
    options = Options.make(target=target, arch=arch, group=group, stream=stream, engine=engine,
                           fusion=fusion, split=split, merge=merge, lanes=lanes)
    d = load(diagram, **sizes)
    if save_for_backward:
        from .gradient import statistics
        d = statistics(d)
    return Kernel(d, options, backend=backend)


def run(diagram, *arrays, backend: str = "reference", target: str | None = None,
        engine: str = "auto", group: dict | None = None, stream: dict | None = None,
        split: dict | None = None, merge: str = "auto", lanes: dict | None = None,
        **named) -> tuple:
    """Run a diagram on arrays; returns a tuple of outputs in declaration order.

    Inputs go positionally in declaration order or by name; other keyword
    arguments naming axes fix their sizes (`d=128`). `backend`, `target`, `engine` and
    the schedule hints `group`/`stream`/`split`/`lanes` and `merge` are as for
    `napkin.compile`.
    """
    kernel, inputs = prepare_run(diagram, arrays, named, backend=backend, target=target,
                                 engine=engine, group=group, stream=stream, split=split,
                                 merge=merge, lanes=lanes)
    return kernel(**inputs)


def prepare_run(diagram, arrays: tuple, named: dict, backend: str = "reference",
                target: str | None = None, engine: str = "auto", group: dict | None = None,
                stream: dict | None = None, split: dict | None = None, merge: str = "auto",
                lanes: dict | None = None):
    """(the Kernel `run` calls, its inputs by name): `napkin run --check` reads the kernel's
    plan after the call, the order its sums were computed in."""
    import numpy as np

    from .backends import check_backend
    from .kernel import Kernel
    from .pipeline import Options
    from .runtime.bind import bind_sizes, match_inputs, stored, to_numpy
    check_backend(backend)
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
    bind_sizes(d, {n: np.shape(v) for n, v in given.items()})    # shapes first, before any copy
    # any real array is taken, in the input's dtype (converted only when that is exact, and
    # never from floats to integers or booleans)
    declared = {s.name: s.dtype for s in d.inputs}
    inputs = {name: np.asarray(stored(name, to_numpy(name, value), declared[name]), order="C")
              for name, value in given.items()}
    kernel = Kernel(d, Options.make(target=target, engine=engine, group=group, stream=stream,
                                    split=split, merge=merge, lanes=lanes),
                    backend=backend)
    return kernel, inputs
