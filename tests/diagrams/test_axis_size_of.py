"""`axis i, j = size(i)` (language 1.2): `j` is as large as `i`, an axis declared before it;
the size equation a gradient keeps where it no longer reads the array that made it."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError

ROWS = "axis i, j = size(i)\nin A[i j]: f32\ny[i] = sum[j](A)\nout y: f32\n"


def test_one_size_read_from_the_inputs_and_checked():
    A = np.random.default_rng(2).standard_normal((5, 5)).astype(np.float32)
    (y,) = napkin.run(ROWS, A)
    np.testing.assert_allclose(y, A.astype(np.float64).sum(1), rtol=1e-5)
    with pytest.raises(NapkinError, match=r"N0308.*`j`"):
        napkin.run(ROWS, np.ones((5, 6), np.float32))
    for given in ("i", "j"):                   # -D of either fixes both
        assert {a.size for a in napkin.load(ROWS, **{given: 7}).ir.graph["axes"].values()} == {7}


def _error(text: str, **sizes) -> str:
    with pytest.raises(NapkinError) as e:
        napkin.load(text, **sizes)
    d = e.value.diagnostics[0]
    return f"{d.code}: {d.message} | {d.help}"


@pytest.mark.parametrize("axes, sizes, expected", [
    ("axis j = size(i), i", {}, "N0201: undeclared axis `i` | declare `i` before `j`: "
                                "`axis i, j = size(i)`"),
    ("axis i, j = size(j)", {}, "N0201: axis `j` is given its own size | name an axis "
                                "declared before it, or a whole number"),
    ("axis i, j = sz(i)", {}, "N0102: an axis's size is a whole number or `size(AXIS)`, not "
                              "`sz(...)` | write `axis j = size(i)`"),
    ("axis i = 4, j = size(i)", {"j": 5}, "N0303: `axis j = size(i)` forces `j` and `i` to "
                                          "one size, but they are 5 and 4"),
])
def test_mistakes(axes, sizes, expected):
    said = _error(axes + "\nin A[i j]: f32\ny[i] = sum[j](A)\nout y: f32\n", **sizes)
    assert said.startswith(expected), said
