"""compiler/lsu.py: the L1 lines one warp request of a directly read load touches, from the
lanes' layout (split ways first, then the woven axes, the first store's last axis fastest):
along the contiguous axis they share lines, along another axis of the array each reads its own
row, along an axis the array lacks they all read one address (a broadcast)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from napkin.compiler import lsu


def _model(woven, store_axes):
    return NS(woven=woven, arrays=(NS(role="store", axes=store_axes),))


@pytest.mark.parametrize("axes, split, expect", [
    (("x", "d"), (("d", 32),), 1),          # 32 lanes along d: 64 contiguous bytes, one line
    (("x", "d"), (), 1),                    # lanes along r, which the load lacks: a broadcast
    (("r", "d"), (), 32),                   # lanes along r, its rows: 32 rows, 32 lines
    (("r", "d"), (("d", 4),), 8),           # 4 lanes along d (8 bytes), 8 rows along r
])
def test_the_lines_a_request_touches(axes, split, expect):
    arr = NS(axes=axes, bytes=2)
    choice = NS(split=split, thread=(("r", 1),))
    lines = lsu.request_lines(arr, _model(("r",), ("r",)), choice, {"r": 64, "d": 64, "x": 9})
    assert float(lines) == expect
    assert float(lsu.wavefronts_per_value(arr, _model(("r",), ("r",)), choice,
                                          {"r": 64, "d": 64, "x": 9})) == expect / 32


def test_a_thread_tile_spaces_the_lanes_along_the_row():
    """Threads along the contiguous axis holding 4 values each: lanes 4 values apart, 32
    lanes of f32 span 512 bytes, four lines."""
    arr = NS(axes=("r", "c"), bytes=4)
    choice = NS(split=(), thread=(("c", 4), ("r", 1)))
    assert float(lsu.request_lines(arr, _model(("r", "c"), ("r", "c")), choice,
                                   {"r": 1, "c": 128})) == 4
