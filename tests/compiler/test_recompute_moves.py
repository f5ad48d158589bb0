"""Recomputation's exchange move (compiler/recompute_moves.py): attention's d = 128 backward
at the issue's size (h100) adds dK across dQ's blocks of queries and keeps dV apart (4.88 ms,
model), which duplications and merges alone miss since dual products (duals.py) made the
kernel storing dS cheap early in the search (5.01 ms: dK and dV together, dQ alone). The
emulated results of that plan are checked against float64 in tests/codegen/test_across.py
(thorough)."""

from __future__ import annotations


import napkin
from napkin.compiler import recompute
from napkin.compiler.model import array_name
from napkin.compiler.plan import plan

SIZES = {"b": 4, "h": 16, "q": 4096, "x": 4096}


def _stores(p) -> list[list[str]]:
    return sorted(sorted(array_name(p.graph, n) for n in kp.kernel.stores) for kp in p.kernels)


def test_dk_leaves_the_dv_kernel_for_dq_s(monkeypatch):
    grad = napkin.grad(napkin.load("attention", d=128))
    p = plan(grad, "h100", SIZES)
    assert [(array_name(p.graph, a.store), kp.schedule.site.row)
            for kp in p.kernels for a in kp.schedule.across] == [("dK", "q")]
    assert ["dV"] in _stores(p) and ["dK", "dQ"] in _stores(p)
    # without the move the search ends where the regression did, slower by the
    # model's own figures
    monkeypatch.setattr(recompute, "moves", lambda lay, layout: iter(()))
    myopic = plan(grad, "h100", SIZES)
    assert ["dK", "dV"] in _stores(myopic)
    assert p.time < myopic.time * 0.99
