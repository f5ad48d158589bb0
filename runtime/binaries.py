"""Compiled kernels, from the disk cache when an intact entry exists, else NVRTC.

The key: napkin's version, a hash of the code generator and its templates and
prelude, the emitted source, NVRTC's version, the options and the exact arch.
Changing any of them compiles anew.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import nvrtc
from .cache import Cache, default_cache
from ..diagrams.version import VERSION

CODEGEN = Path(__file__).parents[1] / "codegen"


@dataclass(frozen=True)
class Binary:
    cubin: bytes
    ptx: str
    resources: dict          # kernel -> {registers, spill_stores, spill_loads, stack_bytes, smem_bytes}
    log: str
    arch: str
    cached: bool = False


@lru_cache(maxsize=1)
def codegen_hash() -> str:
    """A hash of everything that turns plans into source: modules, templates, prelude."""
    h = hashlib.sha256()
    for path in sorted(CODEGEN.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".j2", ".cuh"):
            h.update(path.relative_to(CODEGEN).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def key(source: str, arch: str, options: tuple[str, ...] = (), nvrtc_version=None) -> dict:
    return {
        "napkin": VERSION,
        "codegen": codegen_hash(),
        "source": hashlib.sha256(source.encode()).hexdigest(),
        "nvrtc": list(nvrtc_version if nvrtc_version is not None else nvrtc.version()),
        "options": list(options),
        "arch": arch,
    }


def get(source: str, arch: str, options: tuple[str, ...] = (), cache: Cache | None = None) -> Binary:
    """The cubin, PTX and ptxas report of `source` for `arch`."""
    options = nvrtc.validate_options(options)
    nvrtc.validate_arch(arch)
    cache = cache if cache is not None else default_cache()
    k = key(source, arch, options)
    entry = cache.get(k)
    if entry is not None and _well_formed(entry.meta):
        meta = entry.meta
        return Binary(entry.payload, meta["ptx"], meta["resources"], meta.get("log", ""), arch, True)
    compiled = nvrtc.compile(source, arch=arch, options=options)
    resources = {name: {f: getattr(r, f) for f in RESOURCE_FIELDS}
                 for name, r in compiled.resources.items()}
    cache.put(k, {"ptx": compiled.ptx, "resources": resources, "log": compiled.log}, compiled.cubin)
    return Binary(compiled.cubin, compiled.ptx, resources, compiled.log, arch, False)


RESOURCE_FIELDS = ("registers", "spill_stores", "spill_loads", "stack_bytes", "smem_bytes")


def _well_formed(meta: dict) -> bool:
    """Whether an intact entry's metadata is what `get` writes (else it is compiled anew)."""
    resources = meta.get("resources")
    return (isinstance(meta.get("ptx"), str) and isinstance(meta.get("log", ""), str)
            and isinstance(resources, dict)
            and all(isinstance(r, dict) and all(type(r.get(f)) is int for f in RESOURCE_FIELDS)
                    for r in resources.values()))

