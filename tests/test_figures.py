"""explain's formulas come from a disk cache the second time (no sympy), equal to the ones
computed; a damaged, foreign or unwritable cache costs time, never a wrong or failed explain."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import napkin
from napkin import figures, pipeline
from napkin.compiler.cost import Choice
from napkin.compiler.variants import with_choices
from napkin.runtime.cache import Cache


@pytest.fixture
def attention():
    return pipeline.plan(napkin.load("attention"), pipeline.Options.make(shape={"q": 4096, "x": 4096}))


def test_cached_figures_equal_computed_ones(tmp_path, attention):
    cache = Cache(tmp_path)
    for kp in attention.kernels:
        first = figures.figures(kp, attention.target, cache)
        assert first == figures.compute(kp, attention.target)
        assert len(cache.entries()) == 1
        assert figures.figures(kp, attention.target, cache) == first
    assert first["levels"][0][1] == "2*b*d*h*q*(g_q + x)/g_q"     # the paper's H (README)


def test_the_key_follows_what_the_formulas_depend_on(attention):
    kp = attention.kernels[0]
    two = pipeline.plan(napkin.load("attention"), pipeline.Options.make(target="two-level"))
    assert figures.key(kp, attention.target) != figures.key(two.kernels[0], two.target)
    # a tile of 1 is written as 1, so a choice grouping q by 1 has other formulas
    small = pipeline.plan(napkin.load("softmax"), pipeline.Options.make(shape={"r": 37, "c": 9}))
    by1 = with_choices(small, [Choice((("r", 1),))]).kernels[0]
    by4 = with_choices(small, [Choice((("r", 4),))]).kernels[0]
    by8 = with_choices(small, [Choice((("r", 8),))]).kernels[0]
    assert figures.key(by1, small.target) != figures.key(by4, small.target)
    assert figures.key(by4, small.target) == figures.key(by8, small.target)


def test_a_damaged_entry_is_recomputed(tmp_path, attention):
    cache = Cache(tmp_path)
    kp = attention.kernels[0]
    right = figures.figures(kp, attention.target, cache)
    key = figures.key(kp, attention.target)
    cache.put(key, {}, json.dumps({"levels": [["wrong"]], "flops": 3}).encode())
    assert figures.figures(kp, attention.target, cache) == right
    (path, _), = cache.entries()
    path.write_bytes(path.read_bytes()[:-5])           # truncated: the checksum fails
    assert figures.figures(kp, attention.target, cache) == right


def test_an_unwritable_cache_only_costs_time(tmp_path, attention, monkeypatch):
    from napkin.runtime import trusted
    cache = Cache(tmp_path)

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(trusted, "write", full)
    kp = attention.kernels[0]
    assert figures.figures(kp, attention.target, cache) == figures.compute(kp, attention.target)
    assert not list(tmp_path.iterdir())


def test_a_second_explain_does_not_import_sympy(tmp_path):
    code = ("import sys; from napkin.cli import main; main(['explain', 'attention']); "
            "print('sympy' in sys.modules, file=sys.stderr)")
    env = {"NAPKIN_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=300) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    assert runs[0].stderr.strip().endswith("True") and runs[1].stderr.strip().endswith("False")
