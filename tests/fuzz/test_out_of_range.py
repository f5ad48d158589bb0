"""Positions outside their axis in random diagrams: an integer input that the generator reads
as a position (a page table, a token id) is filled with a value outside every axis it is read
along; the reference and the interpreter must both refuse it, N0407 at a gather's
line, one of those reading it (docs/language.md: an out-of-range read whose value is used is
an error on the CPU backends), or both take it where only a `where`'s branch not taken reads it. The emitted
CUDA clamps instead, which tests/runtime/test_gathers.py checks by hand."""

from __future__ import annotations

import os

import numpy as np

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import napkin
from napkin.compiler import ir
from napkin.compiler.graph import ancestors
from napkin.diagrams.diagnostics import NapkinError, Source

from .gen import diagrams, inputs_for

_SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))
EXAMPLES = 8 if _SCALE < 2 else int(15 * _SCALE)   # (8 by default: the CPU budget)


def _read_as_positions(d, size):
    """{integer input: [(the size of an axis it is read along, the gather's line, whether an
    output needs that gather)]}, the input read directly (`I0[i]`, maybe renamed) as a
    position. (The reference also evaluates equations no output needs; the interpreter
    does not.)"""
    g = d.ir
    needed = set().union(*(ancestors(g, o) | {o} for o in g.graph["outputs"].values()))
    found: dict[str, list] = {}
    for n in g.nodes:
        op = ir.op(g, n)
        if not isinstance(op, ir.Gather):
            continue
        base, *index = ir.operands(g, n)
        axes = ir.type_of(g, base).axes
        it = iter(index)
        for k, label in enumerate(op.labels):
            if label is not None:
                continue
            m = next(it)
            if isinstance(ir.op(g, m), ir.View):
                m = ir.operands(g, m)[0]
            if isinstance(ir.op(g, m), ir.Input):
                found.setdefault(ir.op(g, m).name, []).append((size[axes[k]], n in needed))
    return found


def _lines_reading(d, name):
    """The lines of the gathers whose positions are computed from input `name` (directly, or
    through another gather of it: a nested read fails where its inner one gives the value)."""
    g = d.ir
    source = g.graph["inputs"][name]
    return {g.nodes[n]["span"].line for n in g.nodes if isinstance(ir.op(g, n), ir.Gather)
            and any(source in ancestors(g, m) | {m} for m in ir.operands(g, n)[1:])}


def _failure(d, inputs, backend):
    try:
        napkin.run(d, **inputs, backend=backend)
    except NapkinError as exc:
        return exc.diagnostics[0]
    return None


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(diagrams(positions=True), st.booleans())   # (unbiased: 9 in 10 had no such read)
def test_an_out_of_range_position_is_the_same_error_on_both_cpu_backends(case, below):
    d = napkin.load(Source("<fuzz>", case.text))
    axes = d.ir.graph["axes"]
    by_rep = {axes[a].rep: s for a, s in case.shape.items() if a in axes}
    size = {a: info.size if info.size is not None else case.shape.get(a, by_rep.get(info.rep))
            for a, info in axes.items()}
    found = _read_as_positions(d, size)
    found = {name: reads for name, reads in found.items() if any(live for _, live in reads)}
    assume(found)
    name = sorted(found)[0]
    inputs = inputs_for(d, case.shape, case.seed)
    value = -1 if below else max(s for s, _ in found[name])   # outside every axis it is read along
    inputs[name] = np.full(np.shape(inputs[name]), value, np.asarray(inputs[name]).dtype)
    want = _failure(d, inputs, "reference")
    got = _failure(d, inputs, "interpret")
    if want is None:        # read only in the branch of a `where` not taken: no error on either
        assert got is None, got
        return
    assert want.code == "N0407", want
    assert got is not None and got.code == "N0407", got
    # either may stop at another of the gathers reading it first (their orders differ)
    lines = _lines_reading(d, name)
    assert want.span.line in lines and got.span.line in lines, (got, want, lines)
