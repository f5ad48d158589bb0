"""Helpers for the code generation tests: library diagrams in every dtype, odd shapes."""

from __future__ import annotations

import re

import napkin
from napkin.diagrams.diagnostics import Source
from napkin.diagrams.sources import library_source

# odd sizes next to tile multiples: 1, primes, T-1, T+1
SHAPES = {"b": 2, "h": 3, "q": 37, "x": 50, "m": 33, "k": 65, "n": 17, "t": 31, "i": 47, "o": 29,
          "r": 7, "c": 129, "f": 63, "g": 2}


def library(name: str, dtype: str = "f16", **sizes):
    text = library_source(name).text
    text = re.sub(r":\s*f16\b", f": {dtype}", text)
    return napkin.load(Source(f"<library:{name}:{dtype}>", text), **sizes)


def shape_of(d, **over) -> dict[str, int]:
    """Odd sizes for the dynamic axes: one per size class (axes the diagram reads one along
    the other take the first one's, else N0303)."""
    axes = d.ir.graph["axes"]
    out, by_rep = {}, {}
    for a, s in d.axes.items():
        if s is None:
            rep = axes[a].rep
            out[a] = by_rep.setdefault(rep, over.get(a, SHAPES.get(a, 19)))
    return out
