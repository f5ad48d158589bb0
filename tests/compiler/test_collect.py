"""The planning stages collect garbage less often in full (compiler/collect.py): the oldest
generation's threshold is raised while fuse and tile run, and every threshold is restored
after them, when they return and when they raise."""

from __future__ import annotations

import gc

import pytest

import napkin
from napkin.compiler import collect, plan as plan_mod
from napkin.compiler.plan import plan


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_stages_raise_the_oldest_threshold_and_restore_them(thresholds, monkeypatch):
    in_fuse, in_tile = [], []
    real_priced, real_tile = plan_mod.merge.priced, plan_mod._tile
    monkeypatch.setattr(plan_mod.merge, "priced",
                        lambda *a, **k: in_fuse.append(gc.get_threshold()) or real_priced(*a, **k))
    monkeypatch.setattr(plan_mod, "_tile",
                        lambda *a, **k: in_tile.append(gc.get_threshold()) or real_tile(*a, **k))
    p = plan(napkin.load("matmul"), "h100", {})
    assert p.kernels and in_fuse and in_tile
    assert all(t == (700, 10, collect.OLDEST) for t in in_fuse + in_tile), (in_fuse, in_tile)
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_are_restored_when_a_stage_raises(thresholds, monkeypatch):
    def refuse(*a, **k):
        raise RuntimeError("refused")
    monkeypatch.setattr(plan_mod.merge, "priced", refuse)
    with pytest.raises(RuntimeError, match="refused"):
        plan(napkin.load("matmul"), "h100", {})
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_stages_restore_the_thresholds_the_first_found(thresholds):
    # two stages at once (threads, or one inside another) leaving in the other order than
    # they entered: the second must not restore the raised threshold it found
    a, b = collect.fewer_full_collections(), collect.fewer_full_collections()
    a.__enter__()
    b.__enter__()
    assert gc.get_threshold() == (700, 10, collect.OLDEST)
    a.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, collect.OLDEST)     # b still runs
    b.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)
