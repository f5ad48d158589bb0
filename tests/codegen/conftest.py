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


def emulate_buffers(p, inputs: dict, sizes: dict, edit=None, grid: int = 16,
                    sanitize: str = "none", times: int = 1, program=None) -> dict:
    """Every global buffer after the plan's launches on the emulator (inputs, intermediates,
    outputs, a last-block merge's counters), by array name; `edit` seeds a bug into the CUDA
    text (it must change it); the grid capped at `grid` blocks (the kernels loop over the
    rest); the plan's launches run `times` times in a row; `program`: the lowered plan to
    run instead of lower(p) (one edited)."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.compiler.split import complete_sizes
    from napkin.runtime import emulate
    from napkin.runtime.emulated import signatures
    from napkin.runtime.launches import buffer_names, make_buffers, make_launches
    prog = program if program is not None else lower(p)
    source = render(prog)
    if edit is not None:
        edited = edit(source)
        assert edited != source, "the seeded bug did not change the source"
        source = edited
    sizes = complete_sizes(p.graph, sizes)
    buffers = make_buffers(prog, inputs, sizes, set(p.graph.graph["inputs"]))
    launches = [emulate.Launch(s.kernel, (min(s.grid, grid), 1, 1), (s.block, 1, 1),
                               s.smem_bytes, s.args) for s in make_launches(prog, sizes)]
    out = emulate.run(source, signatures(prog), launches * times, buffers, sanitize=sanitize,
                      timeout_s=240)
    found = {array: out[b] for array, b in buffer_names(prog).items()}
    for s in p.diagram.outputs:     # outputs as the diagram shapes them (merged axes: merge.py)
        if s.name in found:
            found[s.name] = found[s.name].reshape(tuple(int(sizes[a]) for a in s.axes))
    return found
