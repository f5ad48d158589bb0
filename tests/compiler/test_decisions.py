"""Decisions over a grid of shapes: where the products are eligible and the problem is more
than a few tiles, the planner puts them on tensor cores; below that, it may not; explain
names the bound and what limits the blocks per SM."""

from __future__ import annotations

import itertools

import pytest

import napkin
from napkin.compiler.plan import plan

SMS = 132                      # h100
FRAGMENT = 16                  # rows of one mma.sync fragment (m16n8k16)
HEADS = ((1, 1), (2, 4), (32, 16))          # b * h = 1, 8, 512
# NAPKIN_FUZZ_SCALE >= 2: the whole grid; the default suite drops 1024 (130 and 16384 keep
# both sides of it)
LENGTHS = (1, 16, 130, 1024, 16384) if float(
    __import__("os").environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2 else (1, 16, 130, 16384)


def more_than_a_few_tiles(bh: int, q: int, x: int) -> bool:
    """Larger than a few tiles, for FlashAttention-2's 16-row fragments: every head has at
    least one whole fragment of rows (q >= 16; fewer rows, decoding, pad a fragment with up
    to 15 empty rows, and either engine may win: not asserted), there is at least one
    fragment per SM over all heads (b h ceil(q / 16) >= 132), and a few 64-key chunks to
    stream (x >= 128)."""
    return q >= FRAGMENT and bh * -(-q // FRAGMENT) >= SMS and x >= 128


THOROUGH = float(__import__("os").environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2


@pytest.mark.parametrize("d", [pytest.param(64, marks=pytest.mark.thorough), 128])
def test_attention_runs_flashattention_2_wherever_there_are_enough_rows(d):
    """The grid's few-row shapes (q = 1 and 16) are planned too; where the rule above holds
    the plan is the one FlashAttention-2 kernel, and the grid holds such few-row shapes.
    (d = 128 in the default run: the points the rule holds at, the only ones it asserts on;
    the others, whose plans assert nothing but that they plan, are planned at d = 64 and,
    with NAPKIN_FUZZ_SCALE >= 2, at d = 128 too: 4 of the test's 6.6 CPU-s at d = 128.)"""
    diagram = napkin.load("attention", d=d)
    wrong, few_rows = [], 0
    for (b, h), q, x in itertools.product(HEADS, LENGTHS, LENGTHS):
        if d != 64 and not THOROUGH and not more_than_a_few_tiles(b * h, q, x):
            continue
        p = plan(diagram, "h100", {"b": b, "h": h, "q": q, "x": x})
        engines = [kp.schedule.engine for kp in p.kernels]
        if more_than_a_few_tiles(b * h, q, x):
            few_rows += q == FRAGMENT
            # one FlashAttention-2 kernel, or its split over the keys (the partial states on
            # the tensor cores, then their merge) where the blocks would leave SMs idle
            split = p.split is not None and engines[0] == "attention" and len(engines) == 2
            if engines != ["attention"] and not split:
                wrong.append(((b * h, q, x), engines))
    assert not wrong, wrong
    # b h = 512 with 16 rows a head, at each x of at least 130 (130, 1024, 16384 at scale 2)
    assert few_rows == sum(x >= 130 for x in LENGTHS)


def test_the_few_tiles_rule_against_hand_counts():
    assert more_than_a_few_tiles(512, 16, 1024)          # 512 fragments
    assert not more_than_a_few_tiles(512, 1, 16384)      # a decode step: 1 row of 16
    assert not more_than_a_few_tiles(8, 130, 16384)      # 8 x 9 = 72 fragments < 132 SMs
    assert more_than_a_few_tiles(1, 16384, 130)          # 1024 fragments
    assert not more_than_a_few_tiles(512, 1024, 16)      # one chunk of keys


def test_tiny_attention_takes_the_engine_that_issues_less():
    """Fewer queries than a fragment's 16 rows (b = h = 1, q = x = 8): both engines are
    launch-bound (3.19 us on the tensor cores, half their tile padding, 3.55 on the CUDA
    cores, model figures), and the tensor cores issue less: static SASS 3.97e-10 s of issue
    slots against 9.33e-9 (sm_90, model_check.kernel_sass; the CUDA cores' 32 lanes
    splitting d each run the online softmax, which the model charges since
    compiler/issue_pair.py: it kept this attention on the CUDA cores before)."""
    shape = {"b": 1, "h": 1, "q": 8, "x": 8}
    d = napkin.load("attention", d=64)
    p = plan(d, "h100", shape)
    assert [kp.schedule.engine for kp in p.kernels] == ["attention"]
    simt = plan(d, "h100", shape, engine="cuda-cores")
    issue = [dict(kp.cost.compute_parts)["issue"] for kp in (p.kernels[0], simt.kernels[0])]
    assert issue[0] < issue[1]
    assert p.time <= simt.time <= 1.2 * p.time       # launch-bound: within 20%


@pytest.mark.parametrize("k", [130, 8192, pytest.param(16, marks=pytest.mark.thorough),
                               pytest.param(1024, marks=pytest.mark.thorough)])
def test_matmul_runs_on_tensor_cores_wherever_the_output_is_more_than_a_few_tiles(k):
    """More than a few tiles: both sides at least 128 and 32 tiles of 64 x 64 in all. Every
    output the sizes make (130 x 1024 just past 32 tiles, 130 x 130 short of them), reduced
    over an odd k and a long one (split-K) in the default run, over 16 and 1024 too in the
    thorough tier (16 plans each)."""
    d = napkin.load("matmul")
    wrong = []
    sizes = (16, 130, 1024, 8192)
    for m, n in itertools.product(sizes, sizes):
        p = plan(d, "h100", {"m": m, "k": k, "n": n})
        assert len(p.kernels) == (2 if p.split else 1)
        kp = p.kernels[0]                 # a split-K plan: its partial products
        big = min(m, n) >= 128 and m * n >= 32 * 64 * 64
        if big and kp.schedule.engine != "tensor-core product":
            wrong.append(((m, k, n), kp.schedule.engine))
    assert not wrong, wrong


def test_a_launch_bound_matmul_keeps_wgmma_where_it_ties_the_cuda_cores():
    # 16^3 is launch-bound: mma.sync's one warp loses to the CUDA cores; wgmma's warpgroup
    # (sm_90a) ties them, 2.90 against 2.96 us (model), and is kept
    d = napkin.load("matmul")
    (small,) = plan(d, "h100:arch=sm_90", {"m": 16, "k": 16, "n": 16}).kernels
    assert small.schedule.engine == "cuda cores"
    tie = [plan(d, "h100", {"m": 16, "k": 16, "n": 16}, engine=e).time
           for e in ("auto", "cuda-cores")]
    assert tie[0] <= tie[1] <= 1.05 * tie[0]


COMPUTE_NAMES = {"issue": "issue slots", "tensor": "tensor cores", "fp32": "the FP32 pipe",
                 "mufu": "MUFU (exp, rsqrt, division)",
                 "dependent": "the instructions waiting on the products",
                 "chained": "the products and what waits on them in each warp",
                 "L1 wavefronts": "the L1 (warp loads touching many lines)",
                 "lsu": "the LSU (copies into shared memory, ldmatrix)",
                 "merged": "issue slots and the merges across warps (barriers, shared memory)"}


def _largest_term(k: dict) -> str:
    """The bound by hand: the largest of the memory terms and the compute limits."""
    terms = {n: t for n, t in k["terms_seconds"].items() if n != "compute"}
    terms.update({COMPUTE_NAMES[n]: t for n, t in k["compute_seconds"].items()})
    return max(terms, key=terms.get)


def test_explain_names_the_bound_and_the_occupancy_limit(capsys):
    import json
    import re
    from napkin.cli import main
    capsys.readouterr()
    args = ["explain", "attention", "-D", "d=64", "--shape", "b=4,h=16,q=4096,x=4096"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 block per SM limited by registers" in out
    assert main(args + ["--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    (named,) = re.findall(r"predicted [\d.]+ \w+, bound by (.+?) \(", out)
    assert named == k["bound"] == _largest_term(k)
    assert main(["explain", "softmax", "--shape", "r=4096,c=4096", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["occupancy_limit"] in ("registers", "shared memory", "threads", "blocks")
    assert k["bound"] == _largest_term(k)
    assert k["predicted_seconds"] >= max(k["terms_seconds"].values())


# Elementwise kernels, broadcast or not: their only cost is moving the arrays once, so the
# planner's choice is predicted near HBM's roofline (the bytes over the bandwidth: within
# 1.6x, the staged tile's issue slots, 9 us beside HBM's 10 us at r=65536, overlapping only
# in part); the
# search grouped only the axes some load lacks, so a table broadcast over rows (g[c] beside
# X[r c]) left the contiguous axis at one position a block, a sector read per value
# (96 us at r=65536 c=128, model, h100), and an array with no such axis got blocks of one
# row of 32 threads (27 us, issue-bound at 32 blocks per SM); the library's RoPE 1.42 ms at
# its large shape (now 0.18 ms).
ELEMENTWISE = {
    "broadcast_row": ("axis r, c\nin X[r c]: f16\nin g[c]: f16\nY[r c] = X * g\nout Y: f16\n",
                      {"r": 65536, "c": 128}),
    "scaled": ("axis b, h, q, e\nin Q[b h q e]: f16\nY[b h q e] = Q * 2.0\nout Y: f16\n",
               {"b": 2, "h": 16, "q": 2048, "e": 128}),
    "broadcast_head": ("axis b, h, q, e\nin Q[b h q e]: f16\nin C[q e]: f16\n"
                       "Y[b h q e] = Q * C\nout Y: f16\n", {"b": 2, "h": 16, "q": 2048, "e": 128}),
    "rope": ("rope", {"t": 4096, "h": 32, "e": 128}),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_kernels_are_planned_near_the_hbm_roofline(name):
    text, shape = ELEMENTWISE[name]
    d = napkin.load(text)
    p = plan(d, "h100", shape)
    (kp,) = p.kernels
    unique = sum(arr.bytes * __import__("math").prod(p.sizes[a] for a in arr.axes)
                 for arr in kp.model.arrays if arr.role in ("load", "store"))
    roofline = unique / p.target.levels[1].bandwidth
    assert kp.cost.time <= 1.6 * roofline, (kp.choice, kp.cost.time, roofline)
