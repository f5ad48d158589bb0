"""Attention on the CUDA cores holds each thread's query rows in registers across the key
loop and reads each key's K and V values once for all its rows (codegen/held.py): the
plans at the library's default sizes (4 or more rows a thread, 8 or more lanes splitting d),
run on the emulator at odd sizes next to the tiles' multiples, against the float64
reference."""

from __future__ import annotations

import re

import pytest

from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.runtime import compare

from .conftest import emulate_buffers, library, shape_of

# (diagram, the odd sizes it runs at): plain, causal, an additive mask (ALiBi), a window,
# a soft cap, grouped queries (4 x 4 rows a thread), documents packed (a mask from data)
CASES = [("attention", dict(b=1, h=2, q=129, x=127)),
         ("causal_attention", dict(b=1, h=2, q=67, x=67)),
         ("gqa_attention", dict(b=1, g=2, r=3, q=37, x=50)),
         ("alibi_attention", dict(b=1, h=2, q=65, x=63)),
         ("sliding_window_attention", dict(b=1, h=1, q=70, x=70)),
         ("softcap_attention", dict(b=2, h=1, q=17, x=129)),
         ("varlen_attention", dict(h=2, q=67, x=67))]
THOROUGH = {"softcap_attention", "varlen_attention", "sliding_window_attention"}


def _kernel_body(source: str) -> tuple[str, str]:
    """(before the chunk loop, the chunk loop) of the one kernel's block."""
    start = source.index("for (long long c0") if "for (long long c0" in source else \
        source.index("for (int c0")
    return source[:start], source[start:]


@pytest.mark.parametrize("name, sizes", [
    pytest.param(n, s, marks=pytest.mark.thorough) if n in THOROUGH else (n, s)
    for n, s in CASES])
def test_held_rows_and_shared_keys_are_exact(name, sizes):
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    d = library(name, "f16")
    p = plan(d, "h100", {}, engine="cuda-cores")
    (kp,) = p.kernels
    sched = kp.schedule
    rows = 1
    for a, t in sched.thread:
        rows *= t
    assert sched.split and sched.split[0] == "d" and rows >= 4, (sched.thread, sched.split)
    source = render(lower(p))
    before, loop = _kernel_body(source)
    trips = 64 // sched.split[1]
    # Q's values at the thread's rows are read once, before the loop over the keys ...
    assert len(re.findall(r"const float hq\d+ = ", before)) == rows * trips
    assert "hq" not in before.split("__syncthreads();")[0]
    # ... and each key's K value at a lane's trip once, for all the rows: in the loop over
    # groups of Schedule.fold keys (compiler/fold.py) and in the chunk's remainder, one by one
    reads = re.findall(r"const float ld\d+ = napkin_to_float\((sm\d+)\[", loop)
    assert sched.fold == 4
    assert len(reads) == 2 * trips * (sched.fold + 1), reads
    shape = shape_of(d, **sizes)
    inputs = random_inputs(d, shape, 3)
    out = emulate_buffers(p, inputs, shape, grid=6)
    ref, low, order = compare.references(d, inputs, p)
    for s in d.outputs:
        verdict = compare.check(out[s.name], ref[s.name], low[s.name], s.dtype, s.name,
                                order[s.name])
        assert verdict.ok, verdict.message
