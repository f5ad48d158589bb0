"""User mistakes from a sweep of unseen inputs (brief fuzz25) that napkin accepted, or answered
with something other than a clear error: each now renders a golden message with its code,
line, column and hint."""

from __future__ import annotations

import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.render import render_text


def _message(name: str, text: str) -> str:
    with pytest.raises(NapkinError) as exc:
        napkin.load(Source(name, text))
    return render_text(exc.value)


def test_an_input_declared_after_its_first_use():
    """`in X` below the equation that reads X was accepted (inputs entered the scope before
    any equation), while the language says an array is defined before an equation uses it."""
    text = "axis r, c\nY[r c] = X * 2\nin X[r c]: f32\nout Y: f32\n"
    assert _message("late.napkin", text) == """\
error[N0203]: input `X` is used before its `in` declaration
 --> late.napkin:2:10
  |
2 | Y[r c] = X * 2
  |          ^
3 | in X[r c]: f32
  |    - declared here, later
  |
  = help: move `in X` above the first equation that uses it
"""
    # the same input declared first, and `out` or hints before everything, stay legal
    napkin.load("out Y: f32\naxis r, c\nin X[r c]: f32\nY[r c] = X * 2\n")
