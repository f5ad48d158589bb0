"""Elementwise kernels tiled along their store's contiguous axis and the one outside it
(compiler/search.contiguous_axes), planned at large sizes and run by the CPU emulator at odd
sizes next to the tiles against the float64 reference: a table broadcast over rows and over
heads, and RoPE's rotate-half gather."""

from __future__ import annotations

import pytest

import napkin
from napkin.compiler.plan import plan

from ..compiler.test_decisions import ELEMENTWISE
from .test_tensor_cores import assert_close

ODD = {"r": 37, "c": 130, "b": 2, "h": 3, "q": 17, "e": 40, "t": 33}


@pytest.mark.parametrize("name", ["broadcast_row", "broadcast_head", "rope"])
def test_elementwise_tiles_match_the_reference(name):
    text, shape = ELEMENTWISE[name]
    d = napkin.load(text)
    p = plan(d, "h100", shape)
    (kp,) = p.kernels
    inner = [a for a, g in kp.choice.group if g > 1]
    assert inner, kp.choice          # grouped along the contiguous axis or the one outside
    assert_close(d, p, {a: ODD[a] for a in shape})
