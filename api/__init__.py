"""napkin: a compiler from neural circuit diagrams to IO-aware GPU kernels.

    import napkin
    d = napkin.load("attention")            # a path, a library name or diagram text
    (O,) = napkin.run(d, Q, K, V)           # the reference executor (float64, rounded)

Importing napkin loads neither CuPy nor PyTorch.
"""

from .diagrams.diagnostics import NapkinError

from .diagrams.version import VERSION as __version__
__all__ = ["load", "run", "compile", "grad", "statistics", "Diagram", "Kernel", "NapkinError",
           "__version__"]


def __getattr__(name):
    # The API pulls in the compiler and NumPy; keep `import napkin` itself light.
    if name in ("load", "run", "compile"):
        from . import api
        return getattr(api, name)
    if name in ("grad", "statistics"):
        from . import gradient
        return getattr(gradient, name)
    if name == "Kernel":
        from .kernel import Kernel
        return Kernel
    if name == "Diagram":
        from .api import Diagram
        return Diagram
    raise AttributeError(f"module 'napkin' has no attribute {name!r}")
