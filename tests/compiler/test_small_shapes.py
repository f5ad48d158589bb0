"""The counts that brought the kernels at record_plans.py's small odd shape (dynamic axes 77 and
130, `benchmarks/model_check.py --kernels --small`, static SASS over the model's issue slots,
h100) in: each against a hand count, on hand-made SASS and CUDA where the estimate reads them,
on the library's diagrams where the model counts them (no compiler)."""

from __future__ import annotations

from types import SimpleNamespace

import napkin
from napkin.compiler.plan import plan


def test_a_row_of_a_runtime_length_is_copied_row_by_row():
    """copies.costs / issue_simt._copy: codegen/staging.stage copies a tile over its flat index
    only where its row length is a constant (its coordinates divided out by constants); a row
    as long as a runtime size is walked row by row whatever its length. RMSNorm at c = 77,
    r = 130 in blocks of 4 rows and 256 threads copies X's 4 rows of 77 (runtime c) row by row:
    4 x (COPY_ROW 40 + one round, COPY_EACH 8) = 192 a warp, not the flat copy's 2 rounds of
    COPY_FLAT 20 = 40 (static SASS/model 1.61 with it); a tile of 4 rows of a constant 77 (a
    fixed c) is flat."""
    from napkin.compiler import copies, issue_simt
    assert copies.costs(4, 77, 1, 256, constant=False)[2] == False  # noqa: E712
    assert copies.costs(4, 77, 1, 256)[2] == True  # noqa: E712
    d = napkin.load("rmsnorm")
    p = plan(d, "h100", {"c": 77, "r": 130})
    (kp,) = p.kernels
    (x,) = [a for a in kp.model.arrays if a.role == "load" and a.axes == ("r", "c")]
    rows = SimpleNamespace(stream=None)
    assert issue_simt._copy(x, rows, p.sizes, {"r": 4, "c": 77}, 256, kp.model.fixed) == \
        4 * (40 + 8)
    assert issue_simt._copy(x, rows, p.sizes, {"r": 4, "c": 77}, 256, frozenset({"c"})) == \
        2 * 20


def test_every_launched_block_runs_its_block(monkeypatch):
    """issue.compute on the CUDA cores: a block past the arrays' end runs its set-up, copies,
    loops and merges all the same (tiled_work.blocks_padding).
    swiglu's first kernel at the small shape (t = 130, f = 77 in blocks of 16 x 4) launches
    ceil(130 / 16) x ceil(77 / 4) = 9 x 20 = 180 blocks of 4 warps: BLOCK_BASE one more is
    720 warp instructions more, not the 156.4 fractional blocks' 626 (static SASS/model 1.57
    with them)."""
    from napkin.compiler import issue_simt, tiled_work
    from napkin.compiler.cost import Choice, evaluate
    from napkin.compiler.variants import with_choices
    p = plan(napkin.load("swiglu"), "h100", {"f": 77, "m": 130, "o": 77, "t": 130})
    # (the planner's choice this was written for; it now takes the tensor cores: duals.py)
    simt = Choice((("f", 4), ("t", 16)), ("m", 130), (("f", 2), ("t", 2)), split=("m", 8))
    p = with_choices(p, [simt] + [k.choice for k in p.kernels[1:]])
    kp = p.kernels[0]
    assert dict(kp.choice.group) == {"f": 4, "t": 16} and kp.schedule.threads == 128
    assert tiled_work.blocks_padding(kp.choice, p.sizes) == (144 / 130) * (80 / 77)

    def issue(**constants):
        for name, value in constants.items():
            monkeypatch.setattr(issue_simt, name, value)
        cost = evaluate(kp.model, kp.columns, kp.choice, p.sizes, p.target)
        return dict(cost.compute_parts)["issue"] * p.target.per_second("schedulers")
    base = issue()
    assert issue(BLOCK_BASE=issue_simt.BLOCK_BASE + 1) - base == \
        __import__("pytest").approx(180 * 4)


def test_a_row_read_by_the_threads_along_another_axis_is_read_by_each():
    """issue_simt.loop_reads: the lanes' loops over a row read what the register level moves
    of a load, every thread its own reads. swiglu's first kernel unstreamed (blocks of
    8 x 8 points, one a thread, m split over 2 lanes): X[t m] is read by the gate's and the
    up projection's loops (2), each point's thread its row of m: at t = 130, f = 77, m = 130,
    130 x 77 x 130 values a loop, 2 x that in all; counted as the block's tile of X once a
    loop, the 8 threads along f read 1/8 of it."""
    from napkin.compiler import issue_simt
    p = plan(napkin.load("swiglu"), "h100", {"f": 77, "m": 130, "o": 77, "t": 130})
    kp = p.kernels[0]
    (x,) = [a for a in kp.model.arrays if a.role == "load" and a.axes == ("t", "m")]
    (row,) = [r for r in kp.model.loop_reads if r[0] == x.node]
    assert len(row[1]) == 2 and row[2] == 0
    values = 130 * 77 * 130
    moved, read, lanes = issue_simt.loop_reads(kp.model, SimpleNamespace(stream=None),
                                               [(x, 2.0 * values)])
    assert (moved, read, lanes) == (2.0 * values, 2 * values, 2 * values * issue_simt.READ_NARROW)


def test_a_streamed_variance_is_welfords_update_and_merge(monkeypatch):
    """issue.STREAMED_VAR and issue_simt.MERGE_VARIANCE: a variance streamed on the CUDA cores
    is Welford's one-pass update, an IEEE division a value (20 a value in layernorm's lane loop,
    sm_90, static: its division 14 of them), and its lanes merge by Chan's rule, two divisions
    a step (38); a streamed mean merges its sum alone, MERGE_VALUE. Layernorm at c = 77 streamed
    in one chunk of 77 over 32 lanes (4 rows a block of 4 warps): the var's fp32 is 11 a value
    over its 130 x 77 values, not the table's 3; per warp 5 steps of (38 + 2) merges, not
    5 x (13 + 6)."""
    import numpy as np
    import pytest
    from napkin.compiler import issue, issue_simt
    from napkin.compiler.choices import Choices
    from napkin.compiler.cost import Choice, evaluate
    p = plan(napkin.load("layernorm"), "h100", {"c": 77, "r": 130})
    (kp,) = p.kernels
    streamed = Choice(group=(("r", 4),), stream=("c", 77), thread=(("r", 1),), split=("c", 32))
    assert float(np.asarray(issue_simt.merges(kp.model, Choices.of(streamed)))) == 5 * (38 + 2)

    def fp32():
        cost = evaluate(kp.model, kp.columns, streamed, p.sizes, p.target)
        return dict(cost.compute_parts)["fp32"] * p.target.per_second("fp32_lanes")
    base = fp32()
    monkeypatch.setattr(issue, "STREAMED_VAR", (12, 1, 7))
    assert fp32() - base == pytest.approx(130 * 77)


# a blocks' loop (0x20-0xe0) around a size-tested copy: a guard over both versions (0x20, to
# past the taken one: a block whose row is empty), the test's branch to the version the sizes
# take (0x30 -> 0xa0), the other version's peeled copy and its loop (0x60-0x80) and the
# branch past the taken version (0x90 -> 0xd0); the taken version's loop (0xa0-0xc0)
SIZE_TESTED = ["S2R", "LOP3", "@P4 BRA 0xd0", "@P0 BRA 0xa0", "LDG.E.U16", "STS.U16",
               "LDG.E.U16", "STS.U16", "@P1 BRA 0x60", "BRA 0xd0", "LDG.E", "STS",
               "@P2 BRA 0xa0", "IADD3", "@P3 BRA 0x20", "EXIT", "BRA 0x100"]


def test_the_branch_of_a_size_test_the_sizes_do_not_take_is_not_run():
    """sass_simt.skipped: around a loop no block runs (the version of a size-tested copy the
    sizes do not take), the widest span a forward branch before it jumps over that holds no
    loop a block runs: the test's branch 0x30 -> 0xa0, whose span (0x40-0x90: the peeled
    copy, the loop, the branch past the other version) is 6 instructions no block runs; the
    guard 0x20 -> 0xd0 holds the taken loop; a guard over a taken version of one round (no
    loop) is entered by the test's branch from outside it. cross_entropy at v = 130 (even: the 4-byte copy)
    counted the one-value version's peeled copies, some 50 a row (static SASS/model 1.25 ->
    1.15, h100); layernorm's re-staging `if (n > 77)` at c = 77, some 120."""
    from napkin.runtime.mainloop import loops
    from .test_band_edges import _sass
    from .test_simt_sass import _module
    simt = _module("sass_simt")
    insns = _sass(SIZE_TESTED)
    found = loops(insns)
    outer = max(found, key=lambda lp: lp.end - lp.start)
    assert (outer.start, outer.end) == (0x20, 0xe0)
    inner = [lp for lp in found if lp is not outer and outer.start <= lp.start
             and lp.end <= outer.end]
    untaken = next(lp for lp in inner if lp.start == 0x60)
    taken = next(lp for lp in inner if lp.start == 0xa0)
    weight = {id(untaken): 0, id(taken): 3.0}
    assert simt.skipped(outer, inner, weight) == [(0x30, 0xa0)]
    unrun = [i.address for i in outer.instructions if 0x30 < i.address < 0xa0]
    assert len(unrun) == 6
    # a block that runs the other version: nothing skipped
    assert simt.skipped(outer, inner, {id(untaken): 1.0, id(taken): 3.0}) == []
    # the taken version one round, no loop (softmax's 16-byte copy at c = 4096): the guard of
    # the other version's loop jumps to past both (0x30 -> 0xb0), a span the size test's
    # branch enters (0x20 -> 0x90): not skipped; the test's span (0x30-0x80) is
    insns = _sass(ONE_ROUND)
    found = loops(insns)
    outer = max(found, key=lambda lp: lp.end - lp.start)
    inner = [lp for lp in found if lp is not outer and outer.start <= lp.start
             and lp.end <= outer.end]
    assert [(lp.start, lp.end) for lp in inner] == [(0x50, 0x70)]
    assert simt.skipped(outer, inner, {id(inner[0]): 0}) == [(0x20, 0x90)]


# the size test's branch to the taken version (0x20 -> 0x90), the other version's guard to
# past both (0x30 -> 0xb0), its peeled copy and loop (0x50-0x70), the branch past the taken
# version (0x80 -> 0xb0), the taken version's one round (0x90-0xa0), the blocks' loop back
ONE_ROUND = ["S2R", "LOP3", "@!P0 BRA 0x90", "@P1 BRA 0xb0", "LDG.E.U16", "LDG.E.U16",
             "STS.U16", "@P2 BRA 0x50", "BRA 0xb0", "LDG.E.128", "STS.128", "IADD3",
             "@P3 BRA 0x20", "EXIT", "BRA 0xe0"]


def test_a_packed_attention_divides_its_stored_rows_out():
    """packing.unpacking and codegen/packed._place_lane_rows: a packed attention's epilogue
    reads each stored fragment row's packed axes ((r q): the row's quotient and remainder by
    size(q)) from the lane's tables, filled after the key loop once for each row a lane holds
    (the 4 lanes of its quad), not divided per two stored elements (SASS, static, h100, at
    b = g = 2, r = 4, q = 5: the epilogue 945 -> 579 instructions a warp). GQA there (rows
    packed, 32-bit indices) stores 2 x 2 x 20 rows, 80 x 4 divisions of UNPACK_ROW 23; 48
    each in 64 bits; none where the rows are not packed."""
    from napkin import pipeline
    from napkin.compiler import packing
    p = plan(napkin.load("gqa_attention"), "h100", {"b": 2, "g": 2, "r": 4, "q": 5, "x": 77})
    (kp,) = p.kernels
    assert kp.model.packed
    sizes = packing.sized(kp.model.packed, p.sizes)
    assert packing.unpacking(kp.model, sizes) == 80 * 4 * 23 / 32
    assert packing.unpacking(kp.model, sizes, True) == 80 * 4 * 48 / 32
    cuda = pipeline.through(p, "plan", "cuda", pipeline.Options.make(target="h100"))["cuda"]
    store = next(line for line in cuda.splitlines() if "= napkin_from_float<__half>(acc[" in line)
    assert "[i0][i2 / 2]" in store and "%" not in store and "/ (int)" not in store
    q = plan(napkin.load("attention"), "h100", {"b": 2, "h": 2, "q": 77, "x": 77})
    assert not q.kernels[0].model.packed and packing.unpacking(q.kernels[0].model, q.sizes) == 0


def test_positions_only_gathers_read_are_not_staged(monkeypatch):
    """model.kernel_model: a load read only as a gather's positions (embedding's tok[t]) is
    read from global memory where used, as schedule._staged leaves it, not copied: the model
    charged its copy, COPY_ROW 40 a block and warp, in a block of 94 (static SASS/model 0.71
    at the small shape, m = 77, t = 130, h100, with whole blocks counted)."""
    from napkin.compiler import copies
    from napkin.compiler.cost import evaluate
    p = plan(napkin.load("embedding"), "h100", {"m": 77, "t": 130, "v": 77})
    (kp,) = p.kernels
    (tok,) = [a for a in kp.model.arrays if a.name == "tok"]
    assert tok.unstaged and not kp.schedule.staged

    def issue(**constants):
        for name, value in constants.items():
            monkeypatch.setattr(copies, name, value)
        cost = evaluate(kp.model, kp.columns, kp.choice, p.sizes, p.target)
        return dict(cost.compute_parts)["issue"]
    assert issue(COPY_ROW=1000) == issue(COPY_ROW=40)


def test_what_follows_the_lanes_merge_runs_on_every_lane(monkeypatch):
    """issue_pair.beside / replicated: after the lanes' merge of a split axis each lane holds
    the merged value and runs what follows (an op or store without the split axis), the store
    predicated to one lane but issued by the warp. swiglu's first kernel at the small shape,
    m split over 16 lanes: its silu over (t, f) runs on 16 lanes a point, and STORE one more
    is 130 x 77 x 16 lane instructions more (one a point before: static SASS/model 1.42)."""
    import pytest
    from napkin.compiler import issue_pair, issue_simt
    from napkin.compiler.cost import Choice, evaluate
    p = plan(napkin.load("swiglu"), "h100", {"f": 77, "m": 130, "o": 77, "t": 130})
    kp = p.kernels[0]
    split = Choice(group=(("f", 4), ("t", 16)), stream=("m", 130), thread=(("f", 2), ("t", 4)),
                   split=("m", 16))
    (silu,) = [w for w in kp.model.work if w.op == "silu"]
    assert issue_pair.replicated(kp.model, split, silu) == 16
    (gate,) = [w for w in kp.model.work if w.op == "contract"][:1]
    assert issue_pair.replicated(kp.model, split, gate) == 1

    def lanes(**constants):
        for name, value in constants.items():
            monkeypatch.setattr(issue_simt, name, value)
        cost = evaluate(kp.model, kp.columns, split, p.sizes, p.target)
        return dict(cost.compute_parts)["issue"] * p.target.per_second("schedulers") * 32
    base = lanes()
    assert lanes(STORE=issue_simt.STORE + 1) - base == pytest.approx(130 * 77 * 16)


def test_a_sum_of_a_product_is_its_ffma():
    """issue.SIMT_REDUCE: a sum, mean or variance in a CUDA-core lane loop costs its FADD a
    value, the loop's share being the value's READ's; a sum or mean of a product the loop
    computes costs nothing of its own, the product's FMUL and the FADD being one FFMA
    (Work.summand). In rmsnorm's SASS at 4096 (sm_90, static) the loop over X * X issues 3.9
    a value, LDS.U16, HADD2.F32 and FFMA and the loop's share; the model priced 5.5 (READ 3,
    the product 1, the mean's (1, 0, 0.5)). At c = 77, r = 130, hand count of the FP32 lane
    instructions: rmsnorm's three products a point (the square's FFMA, the two of its output)
    and a row's add and rsqrt (1 + 2) on each of the 64 lanes splitting c; layernorm's mean,
    its difference, the variance's FADD and FFMA, the two products and the add a point, and
    a row's add and rsqrt on each of its 32 lanes."""
    from napkin.compiler.cost import evaluate

    def fp32(name):
        p = plan(napkin.load(name), "h100", {"c": 77, "r": 130})
        (kp,) = p.kernels
        cost = evaluate(kp.model, kp.columns, kp.choice, p.sizes, p.target)
        return kp, dict(cost.compute_parts)["fp32"] * p.target.per_second("fp32_lanes")
    kp, rms = fp32("rmsnorm")
    assert [(w.op, w.summand) for w in kp.model.work if w.op == "mean"] == [("mean", "mul")]
    assert dict([kp.choice.split])["c"] == 64
    assert rms == 77 * 130 * 3 + 130 * 64 * 3
    kp, ln = fp32("layernorm")
    assert dict([kp.choice.split])["c"] == 32 and not kp.choice.stream
    assert ln == 77 * 130 * 7 + 130 * 32 * 3


def test_a_loop_over_the_chunk_runs_its_mean_trips():
    """sass_simt.trips: a lane loop whose bound is the chunk's length (`xl < clen`) runs, over
    the stream, the mean of its trips in each chunk, the last one's short, not a full chunk's
    trips every chunk. cross_entropy split over v at t = 1024, v = 50257 (the share s_v =
    1571 in 7 chunks of 256, the last 35; 4 lanes): (6 x 64 + 9) / 7 trips a chunk, where 64
    counted the partial's 14% more (static SASS/model 1.35 -> 1.18, h100). A bound not the
    chunk's, or a stream without a partial chunk, as before; the CUDA's loops read alike
    (sass_simt.element_loops, here on test_simt_sass's hand-made kernel: its lanes over a
    chunk with a stride of 8, 32 trips a full chunk of 256, (3 x 32 + 13) / 4 with a last
    chunk of 100)."""
    from .test_simt_sass import CUDA, _module
    simt = _module("sass_simt")
    assert simt.trips("lane", "clen", 4, {}, 256, (7, 35)) == (6 * 64 + 9) / 7
    assert simt.trips("lane", "clen", 4, {}, 256) == 64
    assert simt.trips("lane", "clen", 4, {}, 256, (4, 256)) == 64
    assert simt.trips("tid", "n1", 32, {"n1": 77}, 256, (7, 35)) == 3
    found = simt.element_loops(CUDA, {"n0": 4096, "n1": 4096}, 256, (4, 100))
    assert [f["trip"] for f in found] == [256, (3 * 32 + 13) / 4, 128]
