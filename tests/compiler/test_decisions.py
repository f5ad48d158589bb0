"""Decisions over a grid of shapes: where the products are eligible and the problem is more
than a few tiles, the planner puts them on tensor cores; below that, it may not; explain
names the bound and what limits the blocks per SM."""

from __future__ import annotations

import itertools

import pytest

import napkin
from napkin.compiler.plan import plan

SMS = 132                      # h100
HEADS = ((1, 1), (2, 4), (32, 16))          # b * h = 1, 8, 512
LENGTHS = (130, 1024, 16384)


@pytest.mark.parametrize("d", [64, 128])
def test_attention_runs_flashattention_2_wherever_there_are_enough_rows(d):
    """Enough rows: at least one 16-row fragment per SM (b h q >= 16 * 132), and a few
    chunks of keys (x >= 128)."""
    diagram = napkin.load("attention", d=d)
    wrong = []
    for (b, h), q, x in itertools.product(HEADS, LENGTHS, LENGTHS):
        p = plan(diagram, "h100", {"b": b, "h": h, "q": q, "x": x})
        engines = [kp.schedule.engine for kp in p.kernels]
        if b * h * q >= 16 * SMS and x >= 128 and engines != ["attention"]:
            wrong.append(((b * h, q, x), engines))
    assert not wrong, wrong


def test_tiny_attention_stays_on_the_cuda_cores():
    p = plan(napkin.load("attention", d=64), "h100", {"b": 1, "h": 1, "q": 16, "x": 16})
    assert [kp.schedule.engine for kp in p.kernels] == ["cuda cores"]


def test_matmul_runs_on_tensor_cores_wherever_the_output_is_more_than_a_few_tiles():
    """More than a few tiles: both sides at least 128 and 32 tiles of 64 x 64 in all."""
    d = napkin.load("matmul")
    wrong = []
    sizes = (16, 130, 1024, 8192)
    for m, k, n in itertools.product(sizes, sizes, sizes):
        p = plan(d, "h100", {"m": m, "k": k, "n": n})
        assert len(p.kernels) == (2 if p.split else 1)
        kp = p.kernels[0]                 # a split-K plan: its partial products
        big = min(m, n) >= 128 and m * n >= 32 * 64 * 64
        if big and kp.schedule.engine != "tensor-core product":
            wrong.append(((m, k, n), kp.schedule.engine))
    assert not wrong, wrong
    (small,) = plan(d, "h100", {"m": 16, "k": 16, "n": 16}).kernels
    assert small.schedule.engine == "cuda cores"


def test_explain_names_the_bound_and_the_occupancy_limit(capsys):
    from napkin.cli import main
    capsys.readouterr()
    assert main(["explain", "attention", "-D", "d=64", "--shape", "b=4,h=16,q=4096,x=4096"]) == 0
    out = capsys.readouterr().out
    assert "bound by issue slots" in out
    assert "1 block per SM limited by registers" in out
    assert main(["explain", "softmax", "--shape", "r=4096,c=4096", "--json"]) == 0
    import json
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["occupancy_limit"] in ("registers", "shared memory", "threads", "blocks")
    assert k["bound"] in {name for name in k["terms_seconds"]} | {
        "issue slots", "tensor cores", "the FP32 pipe", "MUFU (exp, rsqrt, division)"}
    assert k["predicted_seconds"] >= max(k["terms_seconds"].values())
