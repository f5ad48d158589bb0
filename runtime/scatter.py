"""The schedule interpreter's scatter-add (compiler/scatter.py, engine SCATTER): at every
position of the scatter's axes, the value added at the rows its indices name, as the kernel
adds them with atomics; an index outside its axis (negative too) adds nothing, as the dense
masked sum it replaces defines. In float64, through the interpreter's own evaluation of the
value, the indices and the guards (runtime/interpret._Block)."""

from __future__ import annotations

import numpy as np

from ..compiler import ir
from . import elementwise
from .region import Region, _align


def run(block, memory: dict, sizes: dict) -> None:
    g, site = block.g, block.kp.schedule.scatter
    axes = site.axes
    shape = tuple(sizes[a] for a in axes)
    region = Region(sizes)
    matched = [v for v, _ in site.matched]

    def over(n, extra=()):
        """Node n over the scatter's axes (and `extra`, size 1 where n lacks one)."""
        return _align(block.value(n, region), axes + tuple(extra))

    valid = np.ones(shape, dtype=bool)
    rows = {}
    for v, idx in site.matched:
        i = np.broadcast_to(elementwise.as_kind(over(idx), "int").astype(np.int64), shape)
        valid &= (i >= 0) & (i < sizes[v])
        rows[v] = i
    for c in site.guards:
        valid &= elementwise.as_kind(over(c), "bool").astype(bool)
    at = np.nonzero(valid)
    coords = dict(zip(axes, at))
    value = np.ones(len(at[0]) if at else 0)
    for f in site.factors:
        data = elementwise.as_kind(over(f, matched), "float").astype(np.float64)
        pick = [coords[a] if data.shape[k] > 1 else 0 for k, a in enumerate(axes)]
        pick += [rows[v][at] if data.shape[len(axes) + k] > 1 else 0
                 for k, v in enumerate(matched)]
        value = value * data[tuple(pick)]
    t = ir.type_of(g, site.store)
    out = np.zeros(tuple(sizes[a] for a in t.axes))
    np.add.at(out, tuple(rows[a][at] if a in rows else coords[a] for a in t.axes), value)
    memory[site.store] = out
