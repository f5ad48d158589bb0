"""The cotangent inputs of a gradient diagram, by the line `napkin grad` writes for them.

A gradient's second line names its cotangents (`# Inputs: the forward's inputs, then one
cotangent per output (dY)`, compiler/grad.py); the planner reads it back, as `napkin run` reads
the first line for a saved gradient's forward (api/saved_inputs.py), so that a gradient
written to a file and planned again is planned the same: the 16-bit storage of cotangents
(stored16.py) reads which arrays are computed from them. Any other diagram has none (a line
edited away plans the backward as an ordinary diagram, its cotangents kept in f32)."""

from __future__ import annotations

import re

from .graph import DiGraph, descendants

TITLE = re.compile(r"# The gradient of (.+), derived by `napkin grad`")
_LINE = "Inputs: the forward's inputs, then one cotangent per output"
_NAMED = re.compile(re.escape("# " + _LINE) + r" \(([\w, ]*)\)")


def cotangent_line(names) -> str:
    """The gradient's second line (less its `# ` and its end): the cotangents by name."""
    return f"{_LINE} ({', '.join(names)})"


def cotangent_inputs(diagram) -> tuple[str, ...]:
    """The inputs of `diagram` that are a gradient's cotangents (empty for any other one)."""
    lines = diagram.source.text.splitlines()
    if len(lines) < 2 or not TITLE.match(lines[0]):
        return ()
    match = _NAMED.match(lines[1])
    if match is None:
        return ()
    inputs = {s.name for s in diagram.inputs}
    return tuple(n for n in (x.strip() for x in match.group(1).split(",")) if n in inputs)


def computed_from_cotangents(g: DiGraph, names) -> frozenset:
    """The nodes of g computed from the named inputs (the backward's cotangents)."""
    found = set()
    for name in names:
        n = g.graph["inputs"].get(name)
        if n is not None:
            found |= descendants(g, n)
    return frozenset(found)
