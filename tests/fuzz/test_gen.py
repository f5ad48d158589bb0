"""The random-diagram generator itself: what it means to write is what the einsum rule does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from .gen import EQ_BUDGET, Array, Gen, Node


@settings(max_examples=20, deadline=None, database=None)
@given(st.data())
def test_a_product_over_budget_contracts_nothing(data):
    """Over EQ_BUDGET, product() falls back to its first factor; the contraction it meant to
    place must not land on that factor (it made `E0[i] = X0 + (X0 + i)` out of X0[i k],
    which the einsum rule rightly refuses: a `load` failure in a long fuzz run)."""
    g = Gen(data.draw)
    g.sizes = {"i": 257, "j": 257, "k": 2}
    g.arrays = [Array("X0", ("i", "k")), Array("X1", ("j", "k"))]
    x0 = g.finish(Node("ref", name="X0", labels=("i", "k")))
    a = g.finish(Node("bin", [x0, g.finish(Node("idx", name="i"))], name="+"))
    b = g.finish(Node("ref", name="X1", labels=("j", "k")))
    assert g.volume(a.free | b.free) > EQ_BUDGET
    factors = iter([a, b])
    g.expr = lambda depth: next(factors)
    node = g.product(1)
    assert node is a and node.contract == ()
    assert g.contractions(node) == set()


def test_a_saved_failure_replays_on_its_target(tmp_path):
    import pytest

    from .gen import Case
    from .harness import Checked, Recorder, load_regression
    recorder = Recorder()
    case = Case("axis a\nin X[a]: f32\nY[a] = X +\nout Y: f32\n", {"a": 5}, 3)
    with pytest.raises(Checked):
        recorder.check(case, emulate=False, target="a100")
    saved = recorder.save(tmp_path)
    again, options = load_regression(saved)
    assert again == case and options["target"] == "a100"
    assert "load error" in (tmp_path / saved.name).with_suffix(".json").read_text()
