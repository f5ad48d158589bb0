"""A split's merge run by the partial kernel's last block of each output tile (issue 15 item 1;
compiler/last_block.py, codegen/tail.py), against the float64 oracle on the emulator."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.codegen.lower import COUNTER, lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError
from napkin.explain import render_text, report
from napkin.pipeline import run_plan
from napkin.runtime.interpret import interpret

from .conftest import emulate_buffers

# (diagram, -D sizes, planning shape, split): plans whose merges the partial kernel can run
# (layernorm: the mean's and the variance's merges, two merge kernels in one tail, on the
# CUDA cores; attention at d = 32: FlashAttention-2 on tensor cores as the partial kernel;
# cross_entropy: a logsumexp and a masked sum merged by one kernel)
LAYERNORM = ("layernorm", {}, {"r": 2, "c": 500000}, {"c": 256})
CROSS_ENTROPY = ("cross_entropy", {}, {"t": 3, "v": 5000}, {"v": 8})   # integer labels
ATTENTION = ("attention", {"d": 32}, {"b": 1, "h": 1, "q": 4096, "x": 4096}, {"x": 4})
# FlashDecoding: one query row a head, the keys split in 8; the merge's shared buffers and
# registers cost the partial kernel a block per SM (13 -> 12), which the model prices
DECODE = ("attention", {"d": 32}, {"b": 1, "h": 32, "q": 1, "x": 32768}, {"x": 8})
GQA_DECODE = ("gqa_attention", {}, {"b": 1, "g": 8, "r": 4, "q": 1, "x": 32768}, {"x": 8})


_PLANS: dict = {}


def _plan(case, merge="last-block"):
    """(diagram, plan), made once per process for each case (the tests read them)."""
    key = (repr(case), merge)
    if key not in _PLANS:
        name, defines, shape, split = case
        d = napkin.load(name, **defines)
        _PLANS[key] = d, plan(d, "h100", shape, {"split": split}, merge=merge)
    return _PLANS[key]


def test_the_planner_merges_a_long_layernorm_in_the_last_block(compiled):
    """Two rows of 500,000: the planner splits the row in 128 (256 before the
    small-shape counts of 2026-12-07: Welford's update, launched blocks) and, by the model, runs the
    mean's and the variance's merges in the partial kernel (a launch fewer, a fence and
    a counter more); `--merge kernel` keeps them as a kernel, and that plan is slower by what
    the tail says it saves. The split is of the statistics' kernel alone (kernel_split.py),
    whose merges of mu and var stay in one kernel: 12.8 us, 13.5 us split across the diagram
    with a merge kernel each (h100 model); forced splits (below) keep a merge kernel each."""
    d = napkin.load("layernorm")
    auto = plan(d, "h100", {"r": 2, "c": 500000})
    kernels = plan(d, "h100", {"r": 2, "c": 500000}, merge="kernel")
    assert auto.split is not None and auto.tail is not None and not auto.tail.forced
    assert kernels.tail is None and kernels.split.parts == auto.split.parts
    names = [kp.kernel.name for kp in auto.kernels]
    assert auto.split.alone is not None and auto.split.alone.arrays == ("mu", "var")
    assert [names[i] for i in auto.tail.merges] == ["k1"] and auto.tail.partial == 0
    assert auto.tail.blocks == 128 and auto.tail.axes == ("r",)
    assert auto.time == pytest.approx(kernels.time - auto.tail.saved)
    assert auto.tail.saved > 0
    prog = lower(auto)
    assert [k.kernel for k in prog.kernels] == ["k0", "k2"]      # k1 runs in k0
    from ..fuzz.injection import token_problems     # generated names only (no user's)
    assert token_problems(render(prog)) == []
    for arch in ("sm_80", "sm_90"):                   # NVRTC compiles it, without spills
        for k, r in compiled(render(prog), arch).resources.items():
            assert r.spill_stores == 0 and r.spill_loads == 0, (arch, k, r)
    assert prog.zeroed == (COUNTER,) and (COUNTER, "i32", ("r",)) in prog.buffers
    text = render_text(report(auto, compare=False))
    rows = dict(auto.kernels[0].schedule.tile)["r"]      # (a row a block: 2 warps split it)
    assert f"merged in kernel k0 by the last of the 128 blocks of each output tile [r={rows}]" \
        in text
    assert text.count("run by kernel k0's last block of each output tile") == 1
    assert "total: 3 kernel(s) in 2 launch(es)" in text
    # the partial kernel holds the merges' shared buffers: its M counts them
    assert auto.kernels[0].cost.levels[1].M > kernels.kernels[0].cost.levels[1].M
    # draw --plan's table says it too
    from napkin.draw.table import rows
    lines = [r.label for r in rows(auto, report(auto, compare=False)) if r.kind == "kernel"]
    assert ["run by k0's last blocks" in line for line in lines] == [False, True, False]


@pytest.mark.parametrize("case, sizes", [
    pytest.param(LAYERNORM, {"r": 5, "c": 1001}, marks=pytest.mark.thorough),  # 256 splits
    (LAYERNORM, {"r": 3, "c": 37}),        # of 4 planned: at 1001 the last five empty, here most
    (ATTENTION, {"b": 2, "h": 3, "q": 77, "x": 130}),   # a tail of rows, odd keys
    (ATTENTION, {"b": 1, "h": 2, "q": 128, "x": 3}),    # splits past the keys
    (CROSS_ENTROPY, {"t": 7, "v": 1001}),
    (DECODE, {"b": 2, "h": 3, "q": 1, "x": 300}),
    # planned at q=1 (the merge's block one row), run at q=3 within the partial kernel's
    # 16 fragment rows: the last block merges each row (only the first one was: NaN rows)
    (DECODE, {"b": 1, "h": 2, "q": 3, "x": 100}),
    (GQA_DECODE, {"b": 1, "g": 2, "r": 7, "q": 2, "x": 77}),    # (r: 4 when planned)
])
def test_last_block_merges_run_on_the_emulator(case, sizes, within_budget):
    d, p = _plan(case)
    assert p.tail is not None and p.tail.forced
    inputs = random_inputs(d, sizes, 5)
    out = emulate_buffers(p, inputs, sizes)
    within_budget(d, inputs, {s.name: out[s.name] for s in d.outputs})
    # every counter is back at zero: the next launch counts from the start
    assert not out[COUNTER].any()
    # the interpreter runs the same plan (the merge kernels after the partial one)
    within_budget(d, inputs, interpret(p, inputs))


def test_a_tail_that_lowers_the_partial_kernels_occupancy_is_priced_not_refused():
    """The merges' shared memory and registers lower the partial kernel's blocks per SM:
    asked for, the tail runs and the partial kernel is costed with them (it was refused,
    N0607, a performance reason refusing a legal request); auto weighs the same figures."""
    from napkin.compiler.cost import evaluate
    d, forced = _plan(DECODE)
    _, kernels = _plan(DECODE, merge="kernel")
    before, after = kernels.kernels[0].cost, forced.kernels[0].cost
    assert after.blocks_per_sm < before.blocks_per_sm
    assert after.levels[1].M > before.levels[1].M
    kp = forced.kernels[0]
    alone = evaluate(kp.model, kp.columns, kp.choice, forced.sizes, forced.target)
    assert alone.time == pytest.approx(before.time) and after.time > alone.time
    assert forced.time == pytest.approx(kernels.time - forced.tail.saved)
    auto = plan(d, "h100", DECODE[2], {"split": DECODE[3]}, merge="auto")
    assert (auto.tail is not None) == (forced.tail.saved > 0)


def test_a_masked_row_and_nan_stay_where_they_belong_with_the_merge_in_the_tail(within_budget):
    """Causal attention on the tensor cores, keys split in 4 and merged in the tail: keys
    past a row's end are masked in every split; a NaN value of one key reaches its column of
    its head's rows (a masked probability is 0, and 0 * NaN is NaN, as the reference says) and
    nothing else: no other head, column or split."""
    d = napkin.load("causal_attention", d=32)
    p = plan(d, "h100", {"b": 1, "h": 1, "q": 4096, "x": 4096}, {"split": {"x": 4}},
             merge="last-block")
    sizes = {"b": 1, "h": 2, "q": 70, "x": 70}
    inputs = random_inputs(d, sizes, 9)
    inputs["V"][0, 1, 40, 3] = np.nan
    out = run_plan(p, inputs, sizes)
    within_budget(d, inputs, out)
    nan = np.isnan(out["O"].astype(np.float32))
    assert nan[0, 1, :, 3].all() and nan.sum() == sizes["q"]


SEEDED = {
    # the counter's target one short: a tile merges before its last split is stored
    "merges early": lambda s: s.replace("== 255;", "== 254;"),
    # the counter never set back: the next launch would never merge
    "no reset": lambda s: s.replace("[napkin_tile] = 0;", "[napkin_tile] = 1;"),
    # every tile counted in one counter: tiles merge with other tiles' splits missing
    "one counter": lambda s: s.replace("[napkin_tile]", "[0]"),
}


@pytest.mark.parametrize("bug", sorted(SEEDED))
def test_seeded_tail_bugs_are_caught(bug):
    d, p = _plan(LAYERNORM)
    sizes = {"r": 5, "c": 1001}
    inputs = random_inputs(d, sizes, 5)
    out = emulate_buffers(p, inputs, sizes, edit=SEEDED[bug])
    from napkin.runtime import compare
    ok = all(v.ok for v in compare.against_reference(
        d, inputs, {s.name: out[s.name] for s in d.outputs}).values())
    assert not (ok and not out[COUNTER].any()), f"{bug}: not caught"


def test_the_counter_protocol_under_thread_sanitizer():
    """The emulator runs blocks on OS threads at once: under ThreadSanitizer the tail (stores,
    fences, the counter's atomicAdd, the last block's reads) reports no race. (A plain
    increment in the atomic's place is reported when the blocks overlap in time, which a
    loaded machine does not promise: not asserted.)"""
    d, p = _plan(CROSS_ENTROPY)
    sizes = {"t": 7, "v": 1001}
    inputs = random_inputs(d, sizes, 5)
    out = emulate_buffers(p, inputs, sizes, sanitize="thread")
    assert not out[COUNTER].any()


def test_merges_the_tail_cannot_hold_are_refused_or_left_to_a_kernel():
    """softmax's normalising pass reads whole rows, which a partial block does not cover:
    `--merge last-block` says why (N0607), auto keeps the merge kernel; a merge whose tile
    and threads would make the partial kernel slower is left to a kernel by auto."""
    d = napkin.load("softmax")
    with pytest.raises(NapkinError) as exc:
        plan(d, "h100", {"r": 4, "c": 1000000}, merge="last-block")
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0607" and "cannot merge in the last block" in diag.message
    assert "`c` is not one the partial kernel's blocks tile" in diag.message
    assert plan(d, "h100", {"r": 4, "c": 1000000}).tail is None
    # FlashAttention-2 at d = 32 split by 4: 32 output tiles of 128 rows merge slower in the
    # partial kernel's last blocks than in a kernel of 4,096 blocks (the model's word)
    _, forced = _plan(ATTENTION)
    _, auto = _plan(ATTENTION, merge="auto")
    assert forced.tail.saved < 0 and auto.tail is None
    assert forced.time > auto.time
    with pytest.raises(NapkinError):
        plan(d, "h100", {"r": 4, "c": 1000000}, merge="sometimes")


# a merge kernel that goes on to read the merged values at other rows of their output
# tiles: reversed (a gather at computed positions) or prefix-summed along the tiled axis
ACROSS_TILES = """axis i = 300, l = 4, m = 3
in X[m i]: f32
E2[i] = sum[l m](X + l)
E4[i] = {}
out E4: f32
"""


@pytest.mark.parametrize("rhs, what", [("E2[(size(i) - 1 - i)]", "gather"),
                                       ("cumsum[i](E2)", "scan")])
def test_a_merge_that_reads_across_output_tiles_is_left_to_a_kernel(rhs, what, within_budget):
    """Fuzz seed 46 (benchmarks/fuzz.py): `E4[i] = E2[size(i) - 1 - i]` after a split
    merge ran in the partial kernel's last block of each tile of i, which read the partial
    states of other tiles, not all stored yet (NaN where the emulator had not written them;
    on a GPU, a race). Such a merge cannot run in the tail: N0607 names the axis, auto keeps
    the merge kernel, and the plan's values are the oracle's."""
    d = napkin.load(ACROSS_TILES.format(rhs))
    with pytest.raises(NapkinError) as exc:
        plan(d, "h100", {}, {"split": {"m": 2}}, merge="last-block")
    message = exc.value.diagnostics[0].message
    assert f"across its output tiles along `i` (a {what})" in message
    p = plan(d, "h100", {}, {"split": {"m": 2}})
    assert p.split is not None and p.tail is None
    inputs = random_inputs(d, {}, 3)
    within_budget(d, inputs, run_plan(p, inputs, p.sizes))


def test_a_last_block_merge_without_a_split_says_there_is_nothing_to_merge(capsys):
    """`--merge last-block` on a plan that splits nothing across blocks did nothing, silently
    (napkin.compile(..., lanes=..., merge="last-block") on cross_entropy ran the plain plan):
    N0607 now says so and how to ask for a split; with one, the merge runs in the tail."""
    from napkin.cli import main
    d = napkin.load("cross_entropy")
    with pytest.raises(NapkinError) as exc:
        plan(d, "h100", {"t": 4096, "v": 1000}, merge="last-block")
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0607" and "nothing to merge" in diag.message
    assert "--split" in diag.help
    assert plan(d, "h100", {"t": 4096, "v": 1000}, {"split": {"v": 4}},
                merge="last-block").tail is not None
    code = main(["explain", "cross_entropy", "--target", "h100", "--shape", "t=4096,v=1000",
                 "--merge", "last-block"])
    err = capsys.readouterr().err
    assert code == 1 and "error[N0607]" in err and "Traceback" not in err


def test_merge_in_the_api_and_on_the_command_line(capsys, within_budget):
    """cross_entropy's logsumexp and label sum merged by the last block of each row tile:
    `napkin.compile(..., merge=)`, `napkin run --merge`, `napkin explain --merge`."""
    from napkin.cli import main
    d = napkin.load("cross_entropy")
    sizes = {"t": 3, "v": 5000}
    inputs = random_inputs(d, sizes, 4)
    kernel = napkin.compile("cross_entropy", backend="emulate", target="h100", split={"v": 64},
                            merge="last-block")
    (L,) = kernel(**inputs)
    within_budget(d, inputs, {"L": L})
    code = main(["run", "cross_entropy", "--backend", "emulate", "--target", "h100",
                 "--shape", "t=3,v=5000", "--split", "v=64", "--merge", "last-block", "--check"])
    text = capsys.readouterr().out
    assert code == 0 and "matches the float64 reference" in text
    code = main(["explain", "cross_entropy", "--target", "h100", "--shape", "t=3,v=5000",
                 "--split", "v=64", "--merge", "last-block"])
    text = capsys.readouterr().out
    assert code == 0 and "by the last of the 64 blocks of each output tile" in text
    assert "asked for" in text
    code = main(["explain", "layernorm", "--target", "h100", "--shape", "r=2,c=500000",
                 "--merge", "kernel"])
    text = capsys.readouterr().out
    assert code == 0 and "merged by kernel k1\n" in text and "run by kernel" not in text


SWEEP = [   # (more in the thorough tier; GQA at b = 32 runs unsplit since its 256 blocks count
            # as whole ones, cost.py `launched`, as FlashAttention-3's rule has it)
    ("gqa_attention", {"d": 128}, {"b": 8, "g": 8, "r": 4, "q": 1, "x": 4096}),
    ("attention", {"d": 128}, {"b": 1, "h": 32, "q": 1, "x": 32768}),
    ("matmul", {}, {"m": 16, "n": 512, "k": 65536}),
] + [pytest.param(*case, marks=pytest.mark.thorough) for case in [
    ("gqa_attention", {"d": 128}, {"b": 1, "g": 8, "r": 4, "q": 1, "x": 4096}),
    ("attention", {"d": 64}, {"b": 1, "h": 1, "q": 4096, "x": 4096}),
    ("rmsnorm", {}, {"r": 2, "c": 500000}),
    ("softmax", {}, {"r": 4, "c": 1000000}),
]]


@pytest.mark.parametrize("name, defines, shape", SWEEP)
def test_the_tail_decision_never_breaks_a_plan(name, defines, shape):
    """Pricing the tail runs for every split plan: at decode and long-row shapes it gives a
    plan or, asked for, N0607; never another error (GQA at b=32 had a fragment's 16 rows over
    4 query heads as the merge's block tile, a tiling the schedule refused: N0604 from auto)."""
    from napkin.compiler.variants import with_merge
    d = napkin.load(name, **defines)
    auto = plan(d, "h200", shape)
    assert auto.split is not None
    try:
        forced = with_merge(plan(d, "h200", shape, merge="kernel"), "last-block")
    except NapkinError as exc:
        assert exc.diagnostics[0].code == "N0607", exc
    else:
        assert forced.tail is not None and forced.tail.forced
        lower(forced)
