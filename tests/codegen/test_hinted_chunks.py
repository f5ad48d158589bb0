"""A stream hint past its axis means the whole axis (hints.fixed_for cuts it to the axis's
size); on tensor cores that is any chunk of the tile candidates that covers the axis
(warps.matches), as a group hint past its axis is: `stream x by 64` at x = 41 runs one
chunk of 64 keys, where it was refused (N0606: no chunk of 41 keys). Run by the CPU emulator
against the float64 reference."""

from __future__ import annotations

import pytest

import napkin
from napkin.compiler import schedule
from napkin.compiler.plan import plan

from .conftest import library
from .test_tensor_cores import assert_close


@pytest.mark.parametrize("name, axis, hint, sizes, engine", [
    ("matmul", "k", 64, {"m": 37, "k": 41, "n": 29}, schedule.PRODUCT),
    ("matmul", "k", 128, {"m": 17, "k": 33, "n": 9}, schedule.PRODUCT),
    ("attention", "x", 128, {"b": 1, "h": 1, "q": 37, "x": 41}, schedule.ATTENTION),
])
def test_a_stream_hint_past_the_axis_takes_a_chunk_covering_it(name, axis, hint, sizes, engine):
    d = library(name, "f16")
    p = plan(d, "h100", sizes, {"stream": {axis: hint}}, engine="tensor-cores")
    (kp,) = p.kernels
    assert kp.schedule.engine == engine
    stream, chunk = kp.choice.stream
    assert stream == axis and chunk >= sizes[axis] and chunk % 16 == 0
    assert_close(d, p, sizes)


def test_a_stream_hint_inside_the_axis_that_no_chunk_is_stays_refused():
    """A chunk of 24 (not a multiple of 16) inside the axis: no tensor-core tiling is it."""
    with pytest.raises(napkin.NapkinError) as exc:
        plan(library("matmul", "f16"), "h100", {"m": 37, "k": 41, "n": 29},
             {"stream": {"k": 24}}, engine="tensor-cores")
    assert exc.value.diagnostics[0].code == "N0606"
