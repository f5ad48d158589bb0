"""The Schedule: built once per kernel, checked on construction; with_choices refuses every
illegal schedule with N0604 naming the rule (one test per invariant), and the lowering reads
the schedule's decisions (threads, engine, warps) instead of deriving them."""

from __future__ import annotations

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.compiler.cost import Choice
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.diagrams.diagnostics import NapkinError

BIG = {"m": 2048, "k": 2048, "n": 2048}


@pytest.fixture(scope="module")
def softmax():
    return plan(napkin.load("softmax"), "h100", {"r": 37, "c": 130})


@pytest.fixture(scope="module")
def matmul():
    p = plan(napkin.load("matmul"), "h100", BIG)
    assert p.kernels[0].schedule.tensor_cores
    return p


def refused(p, choice: Choice) -> str:
    with pytest.raises(NapkinError) as exc:
        with_choices(p, [choice])
    assert exc.value.code == "N0604"
    return exc.value.diagnostics[0].message


def test_planned_schedules_are_legal_and_agree_with_the_lowering(softmax, matmul):
    for p in (softmax, matmul):
        prog = lower(p)
        for kp, k in zip(p.kernels, prog.kernels):
            assert k.threads == kp.schedule.threads
            assert kp.schedule.threads % 32 == 0 and kp.schedule.lanes <= kp.schedule.threads
    assert matmul.kernels[0].schedule.engine == "tensor-core product"
    assert softmax.kernels[0].schedule.engine == "cuda cores"


def test_a_legal_choice_is_accepted(softmax):
    p = with_choices(softmax, [Choice((("r", 4),), ("c", 32), (("r", 1),), ("c", 8))])
    s = p.kernels[0].schedule
    assert s.block_tile() == {"r": 4} and s.stream == ("c", 32) and s.split == ("c", 8)
    assert s.lanes == 32 and s.threads == 32


def test_group_on_an_axis_that_is_not_woven(softmax):
    assert "not a woven axis" in refused(softmax, Choice((("c", 4),)))


def test_a_tile_of_zero(softmax):
    assert "at least 1" in refused(softmax, Choice((("r", 0),)))


def test_a_tile_that_is_not_a_whole_number(softmax):
    assert "at least 1" in refused(softmax, Choice((("r", 2.5),)))


def test_an_axis_tiled_twice(softmax):
    assert "twice" in refused(softmax, Choice((("r", 2), ("r", 4))))


def test_thread_tile_larger_than_the_block_tile(softmax):
    assert "exceeds its block tile" in refused(softmax, Choice((("r", 2),), None, (("r", 4),)))


def test_streaming_an_axis_the_kernel_does_not_reduce(softmax):
    assert "does not reduce" in refused(softmax, Choice((("r", 2),), ("r", 4)))


def test_a_chunk_of_zero(softmax):
    assert "at least 1" in refused(softmax, Choice((("r", 2),), ("c", 0)))


def test_a_split_of_an_axis_that_is_not_reduced(softmax):
    assert "not a reduced axis" in refused(softmax, Choice((("r", 2),), None, (), ("r", 4)))


def test_a_split_over_a_lane_count_shuffles_cannot_merge(softmax):
    assert "warp shuffles" in refused(softmax, Choice((("r", 2),), None, (), ("c", 3)))


def test_more_threads_than_a_block_holds(softmax):
    assert "allows 1024" in refused(softmax, Choice((("r", 37),), None, (), ("c", 32)))


def test_warps_on_a_kernel_with_no_tensor_core_site(softmax):
    assert "gives warps" in refused(softmax, Choice((("r", 16),), None, (("r", 16),), None, None,
                                                    (("r", 1),)))


def _mm(group, chunk, thread, warps) -> Choice:
    return Choice(tuple(sorted(group.items())), ("k", chunk), tuple(sorted(thread.items())),
                  warps=tuple(sorted(warps.items())))


def test_a_tensor_core_schedule_is_accepted(matmul):
    p = with_choices(matmul, [_mm({"m": 64, "n": 64}, 32, {"m": 32, "n": 32}, {"m": 2, "n": 2})])
    s = p.kernels[0].schedule
    assert s.threads == 128 and s.warp_layout() == (2, 2, 32, 32)


def test_a_chunk_that_is_not_a_multiple_of_the_mma_k(matmul):
    assert "multiple of 16" in refused(
        matmul, _mm({"m": 64, "n": 64}, 24, {"m": 32, "n": 32}, {"m": 2, "n": 2}))


def test_warp_tiles_that_are_not_whole_fragments(matmul):
    assert "whole" in refused(
        matmul, _mm({"m": 48, "n": 64}, 32, {"m": 24, "n": 32}, {"m": 2, "n": 2}))


def test_a_block_tile_that_is_not_its_warps_tiles(matmul):
    assert "warp(s) times" in refused(
        matmul, _mm({"m": 128, "n": 64}, 32, {"m": 32, "n": 32}, {"m": 2, "n": 2}))


def test_warps_along_the_wrong_axes(matmul):
    assert "this site needs" in refused(
        matmul, _mm({"m": 64, "n": 64}, 32, {"m": 32, "n": 32}, {"m": 4}))


def test_a_warp_count_the_lowering_does_not_take(matmul):
    assert "warps per block" in refused(
        matmul, _mm({"m": 48, "n": 64}, 32, {"m": 16, "n": 64}, {"m": 3, "n": 1}))


def test_a_split_on_tensor_cores(matmul):
    c = _mm({"m": 64, "n": 64}, 32, {"m": 32, "n": 32}, {"m": 2, "n": 2})
    from dataclasses import replace
    assert "neither splits" in refused(matmul, replace(c, split=("k", 4)))


def test_one_choice_per_kernel_and_only_choices(softmax):
    with pytest.raises(NapkinError) as exc:
        with_choices(softmax, [])
    assert exc.value.code == "N0604" and "one choice per kernel" in exc.value.diagnostics[0].help
    with pytest.raises(NapkinError) as exc:
        with_choices(softmax, [{"group": {"r": 2}}])
    assert "is not a Choice" in exc.value.diagnostics[0].message


@pytest.mark.parametrize("target", [pytest.param("a100", marks=pytest.mark.thorough), "h100"])
def test_the_cost_model_counts_the_threads_the_block_is_launched_with(target):
    from napkin.diagrams.sources import library_names
    for name in library_names():
        d = napkin.load(name)
        for shape in ({}, {a: 4096 for a, s in d.axes.items() if s is None},
                      {a: 77 for a, s in d.axes.items() if s is None}):
            for kp in plan(d, target, shape).kernels:
                assert float(kp.cost.threads) == kp.schedule.threads, (name, shape, kp.choice)


def test_blocks_under_a_warp_are_launched_as_one(softmax):
    """8 threads of work: the block is a warp (32 threads hold the registers and SM slots)."""
    p = with_choices(softmax, [Choice((("r", 1),), ("c", 8), (("r", 1),), ("c", 8))])
    kp = p.kernels[0]
    assert kp.schedule.lanes == 8 and kp.schedule.threads == 32 == float(kp.cost.threads)
    odd = with_choices(softmax, [Choice((("r", 5),), None, (("r", 2),), ("c", 16))])
    kp = odd.kernels[0]     # 3 thread rows (2, 2, 1 of r) x 16 lanes: 48 active, 64 launched
    assert kp.schedule.lanes == 48 and kp.schedule.threads == 64 == float(kp.cost.threads)


def test_placements_say_where_each_array_lives():
    """Attention planned for the CUDA cores at 4096: Q's tile (g_q x d) and K's chunk
    (s_x x d) in shared memory, values and the online softmax's state in registers, no store
    (b = 4, h = 8: blocks enough that the planner does not split the keys)."""
    d = napkin.load("attention")
    p = plan(d, "h100", {"b": 4, "h": 8, "q": 4096, "x": 4096}, engine="cuda-cores")
    (kp,) = p.kernels
    s = kp.schedule
    by = {(pl.name, pl.level): pl for pl in s.placements}
    group, (axis, chunk) = dict(kp.choice.group), kp.choice.stream
    assert axis == "x"
    assert dict(by[("Q", 1)].held) == {"b": 1, "h": 1, "q": group["q"], "d": 64}
    assert dict(by[("K", 1)].held) == {"b": 1, "h": 1, "x": chunk, "d": 64}
    last = len(p.target.levels) - 1
    assert {pl.level for pl in s.placements if pl.role != "load"} == {last}
    assert not any(pl.name == "O" and pl.role == "store" for pl in s.placements)
    from napkin.compiler.buffers import buffers
    assert [b["name"] for b in buffers(p, kp)] == [pl.name for pl in s.placements]


def test_a_lane_split_of_an_axis_a_view_reads_at_another_position():
    """`maximum(E7, E7[k j j])` reads E7 (a streamed reduction's value) at `j`'s index for its
    `i`: with `i` or `j` split over lanes a lane's slot would stand for the index, and the
    value may be another lane's (tests/regressions/fuzz-fca6ef222104 was off by 0.074 so):
    the search never proposes it and the schedule refuses it."""
    from napkin.compiler.model import kernel_model
    from pathlib import Path
    case = Path(__file__).parents[1] / "regressions" / "fuzz-fca6ef222104.napkin"
    p = plan(napkin.load(case.read_text()), "h100")
    (kp,) = p.kernels
    streamed = kernel_model(p.graph, kp.kernel, "l")      # E7 sums l: its state over i, j
    assert {"i", "j"} <= streamed.relabelled and {"i", "j"} <= set(streamed.reduced)
    c = kp.choice
    assert not (c.stream and c.split and c.split[0] in ("i", "j")), c
    bad = Choice((("k", 16),), ("l", 2), (("k", 1),), ("i", 2))
    assert "another lane holds" in refused(p, bad)
