"""Saved statistics consistent with the other inputs, for `napkin run` on a saved gradient.

A saved gradient (`napkin grad --saved`) takes, beside the forward's inputs and the
cotangents, statistics of the forward: each softmax's row logsumexp (`P_lse`) and an output
(`O_saved`). Random values for them are inconsistent with the random `Q`, `K`: the backward's
`exp(S - P_lse)` is then no probability and overflows f16, and `--check` fails on a diagram
napkin computes right. The gradient knows which forward values it reads
(`statistics.saved_sources`), so `napkin run` computes them: it loads the forward the
gradient's first line names (`# The gradient of NAME, derived by napkin grad`), checks that its
saved gradient is exactly this diagram (the text napkin grad writes, all but that first line),
runs `napkin.statistics` of it on the forward's inputs with the reference executor, and takes
each saved input from the output it names. Where no forward is found, the statistics stay
random and `napkin run` says so, instead of calling a mismatch a bug.
"""

from __future__ import annotations

import os
import re

import numpy as np

TITLE = re.compile(r"# The gradient of (.+), derived by `napkin grad`")


def saved_inputs(d) -> tuple[str, ...]:
    """The inputs of a saved gradient that hold the forward's statistics, by the names
    `napkin grad --saved` gives them (`<P>_lse`, `<O>_saved`); empty for any other diagram."""
    text = d.source.text.splitlines()
    if len(text) < 2 or not TITLE.match(text[0]) or "the saved statistics" not in text[1]:
        return ()
    return tuple(s.name for s in d.inputs if re.search(r"_(lse|saved)", s.name))


def forward_of(d):
    """(forward Diagram, wrt) whose saved gradient is `d`'s text, or None."""
    from .compiler.front import load
    from .compiler.grad import gradient_text
    from .diagrams.diagnostics import NapkinError
    lines = d.source.text.splitlines()
    match = TITLE.match(lines[0]) if lines else None
    if match is None:
        return None
    name = match.group(1)
    library = re.fullmatch(r"<library:(\w+)>", name)
    if library:
        candidates = [library.group(1)]
    else:
        candidates = [name, os.path.join(os.path.dirname(d.source.name), name)]
    sizes = {a: s for a, s in d.axes.items() if s is not None}
    outputs = [s.name for s in d.outputs]
    for candidate in dict.fromkeys(candidates):
        if not library and not os.path.isfile(candidate):
            continue
        try:
            fwd = load(candidate)
            fwd = load(fwd, **{a: s for a, s in sizes.items() if a in fwd.axes
                               and fwd.axes[a] != s})
        except NapkinError:
            continue
        inputs = [s.name for s in fwd.inputs]
        for wrt in (None, tuple(o[1:] for o in outputs if o[1:] in inputs)):
            try:
                text = gradient_text(fwd, wrt, True)
            except NapkinError:
                continue
            if text.splitlines()[1:] == lines[1:]:
                return fwd, wrt
    return None


def statistics_for(d, inputs: dict) -> dict | None:
    """The saved inputs of `d`, computed from the forward on `inputs` (which hold the
    forward's inputs by name); None when `d`'s forward cannot be found."""
    found = forward_of(d)
    if found is None:
        return None
    from .api import run
    from .compiler.statistics import saved_sources
    from .gradient import statistics
    from .runtime import dtypes
    fwd, wrt = found
    stats = statistics(fwd)
    outs = run(stats, backend="reference", **{s.name: inputs[s.name] for s in stats.inputs})
    named = {s.name: o for s, o in zip(stats.outputs, outs)}
    declared = {s.name: s.dtype for s in d.inputs}
    return {extra: np.asarray(named[source]).astype(dtypes.numpy_dtype(declared[extra]))
            for extra, source in saved_sources(fwd, wrt)}
