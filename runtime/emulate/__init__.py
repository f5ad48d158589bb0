"""CPU emulator of emitted CUDA: runs the very kernel text a GPU would run, with g++.

    from napkin.runtime.emulate import Launch, Param, run
    out = run(source, {"k": (Param("ptr", "float"), Param("i32", ""))},
              [Launch("k", (4, 1, 1), (128, 1, 1), 0, ("x", 1000))], {"x": x})

See napkin_emulate.h for the execution model (threads as fibers, warp collectives,
sanitizers) and api.run for the options.
"""

from .api import run
from .build import HEADER
from .store import cache_dir
from .errors import EmulatorError
from .spec import CTYPES, Launch, Param

__all__ = ["run", "Param", "Launch", "EmulatorError", "CTYPES", "HEADER", "cache_dir"]
