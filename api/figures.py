"""A kernel's symbolic figures as explain prints them (M and H per level in values and bytes,
FLOPs), cached on disk so that explaining a kernel again does not import or run sympy.

The figures are a pure function of the kernel's cost model, its columns, the skeleton of its
choice (which tiles are symbols, compiler/formulas.py) and the target; the cache key is
their text with a hash of the compiler's code and target data, so any change to either
computes them anew. Entries live in napkin's disk cache (runtime/cache.py: checksummed,
written atomically, ignored when damaged); a cache that cannot be written only costs time.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from .diagrams.version import VERSION

COMPILER = Path(__file__).parents[1] / "compiler"
KIND = "explain-figures"


@lru_cache(maxsize=1)
def compiler_hash() -> str:
    """A hash of everything the figures are computed from: the compiler and its targets."""
    h = hashlib.sha256()
    for path in sorted(COMPILER.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".toml"):
            h.update(path.relative_to(COMPILER).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def key(kp, target) -> dict:
    from .compiler.formulas import skeleton
    what = repr((kp.model, kp.columns, skeleton(kp.choice), target))
    return {"kind": KIND, "napkin": VERSION, "compiler": compiler_hash(),
            "kernel": hashlib.sha256(what.encode()).hexdigest()}


def compute(kp, target) -> dict:
    """The figures, with sympy: per level below the top (M values, H values, H bytes), FLOPs."""
    import sympy

    from .compiler.formulas import simplify, symbolic_cost
    sym_values, _ = symbolic_cost(kp, target, values=True)
    sym_bytes, _ = symbolic_cost(kp, target, values=False)
    levels = [[str(simplify(v.M)), str(simplify(v.H)), str(simplify(b.H))]
              for v, b in zip(sym_values.levels[1:], sym_bytes.levels[1:])]
    flops = str(simplify(sum(sym_values.flops.values(), sympy.Integer(0))))
    return {"levels": levels, "flops": flops}


def _valid(found, levels: int) -> bool:
    return (isinstance(found, dict) and isinstance(found.get("flops"), str)
            and isinstance(found.get("levels"), list) and len(found["levels"]) == levels
            and all(isinstance(lv, list) and len(lv) == 3 and all(isinstance(s, str) for s in lv)
                    for lv in found["levels"]))


def figures(kp, target, cache=None) -> dict:
    """The kernel's figures: from the cache when an intact entry exists, else computed (and
    stored when the cache can take it)."""
    from .runtime.cache import default_cache     # (not binaries: no NVRTC module to load)
    cache = cache if cache is not None else default_cache()
    k = key(kp, target)
    levels = len(kp.cost.levels) - 1
    entry = cache.get(k)
    if entry is not None:
        try:
            found = json.loads(entry.payload)
        except ValueError:
            found = None
        if _valid(found, levels):
            return found
    found = compute(kp, target)
    cache.put(k, {}, json.dumps(found).encode())   # (a full or read-only cache warns, once)
    return found
