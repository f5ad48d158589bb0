"""Reductions split over several warps (64 to 1024 lanes: codegen/across_warps.py), run by the
CPU emulator against the float64 reference: each warp merges its lanes by shuffles, then the
warps' states merge through shared memory after a barrier, and every lane holds the merged
state. Every kind of state the shuffles merge -- a sum, a max, a min, a mean, a variance (two
sums whole, Welford's state streamed), a logsumexp's and a softmax's running max and sum, an
argmax's value and first position, an online softmax's (m, l, o) -- at odd row lengths
(37, 129, 1000: rows shorter than the lanes, a last warp partly idle), whole rows and streamed
ones, with rows of -inf, a row holding +inf, and ties of the maximum in different warps.
Plans are the planner's at these sizes with the split forced (variants.with_choices)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.pipeline import lowered, run_plan
from napkin.runtime import compare

DIAGRAMS = {
    "softmax": "axis r, c\nin X[r c]: f32\nY[r c] = softmax[c](X)\nout Y: f32\n",
    "lse": "axis r, c\nin X[r c]: f32\nL[r] = logsumexp[c](X)\nout L: f32\n",
    "sums": "axis r, c\nin X[r c]: f32\n"
            "L[r] = mean[c](X) + sum[c](X * X) + max[c](X) - min[c](X)\nout L: f32\n",
    "layernorm": "axis r, c\nin X[r c]: f32\nmu[r] = mean[c](X)\nD[r c] = X - mu\n"
                 "Y[r c] = D * rsqrt(mean[c](D * D) + 1e-5)\nout Y: f32\n",
    "var": "axis r, c\nin X[r c]: f32\nmu[r] = mean[c](X)\nD[r c] = X - mu\n"
           "V[r] = mean[c](D * D) + mu\nout V: f32\n",      # (a variance: Welford's, streamed)
    "argmax": "axis r, c\nin X[r c]: f32\nI[r] = argmax[c](X)\nJ[r] = argmin[c](X)\n"
              "out I: i32\nout J: i32\n",
}
ROWS = 7


def _inputs(name: str, c: int, seed: int) -> dict:
    """Random rows; softmax and logsumexp: a row of -inf (all masked), a row half -inf, one
    holding +inf; argmax: a row of equal values, a row whose maximum (and minimum) is tied at
    positions in different warps."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, c)).astype(np.float32) * 3
    if name in ("softmax", "lse"):
        x[1] = -np.inf
        x[2, : c // 2] = -np.inf
        x[3, c // 3] = np.inf
    if name == "argmax":
        x[1] = 0.5
        x[2, [3, c - 2]] = 50.0            # (lanes 3 and c - 2: other warps once c > 64)
        x[2, [4, c - 1]] = -50.0
    return {"X": x}


def forced(name: str, c: int, ways: int, stream: int | None = None, rows: int = 1):
    """The planner's plan at (ROWS, c), split over `ways` lanes, `rows` rows a block (one a
    thread), streaming c in chunks of `stream` (None: as the planner chose)."""
    d = napkin.load(Source(f"<{name}>", DIAGRAMS[name]))
    hints = {"split": {"c": 1}}        # (one kernel: the row not split across blocks)
    if stream:
        hints["stream"] = {"c": stream}
    p = plan(d, "h100", {"r": ROWS, "c": c}, overrides=hints)
    (kp,) = p.kernels
    choice = dataclasses.replace(kp.choice, split=("c", ways), group=(("r", rows),),
                                 thread=(("r", 1),))
    p = with_choices(p, [choice])
    assert p.kernels[0].schedule.threads == rows * ways
    return d, p


def check(name: str, c: int, ways: int, stream=None, rows: int = 1, edit=None) -> dict:
    d, p = forced(name, c, ways, stream, rows)
    inputs = _inputs(name, c, c + ways)
    out = run_plan(p, inputs, p.sizes, edit=edit)
    return compare.against_reference(d, inputs, out, p)


def _ok(verdicts: dict) -> None:
    for array, verdict in verdicts.items():
        assert verdict.ok, (array, verdict.message)


# (each case compiles and emulates one kernel, about a CPU-second: the default run takes one
# case of each kind of state, the rest run with the thorough tier)
CASES = [
    ("softmax", 1000, 128, None, 1), ("lse", 129, 256, None, 1), ("sums", 37, 64, None, 2),
    ("layernorm", 129, 64, None, 2), ("argmax", 1000, 256, None, 1),
    ("softmax", 1000, 128, 256, 1), ("var", 1000, 256, 256, 1), ("argmax", 129, 128, 128, 2),
]
THOROUGH = [
    ("softmax", 37, 64, None, 2), ("softmax", 129, 1024, None, 1), ("lse", 1000, 64, 64, 2),
    ("lse", 37, 512, None, 1), ("sums", 1000, 1024, None, 1), ("sums", 129, 128, 128, 1),
    ("layernorm", 1000, 256, None, 1), ("var", 37, 128, None, 1), ("argmax", 37, 64, None, 2),
    ("argmax", 1000, 512, 512, 1), ("softmax", 129, 64, 64, 4),
]


@pytest.mark.parametrize("name, c, ways, stream, rows", CASES + [
    pytest.param(*case, marks=pytest.mark.thorough) for case in THOROUGH])
def test_a_reduction_split_over_warps_matches_the_reference(name, c, ways, stream, rows):
    _ok(check(name, c, ways, stream, rows))


def _decode_split_over_warps(ways: int):
    """Decode attention on the CUDA cores, the keys streamed by 128 and split over `ways`."""
    d = napkin.load("attention", d=16)
    p = plan(d, "h100", {"b": 1, "h": 2, "q": 1, "x": 300}, {"stream": {"x": 128}},
             engine="cuda-cores")
    k = next(k for k in p.kernels if k.schedule.stream and k.schedule.stream[0] == "x")
    return d, with_choices(p, [dataclasses.replace(kp.choice, split=("x", ways)) if kp is k
                               else kp.choice for kp in p.kernels])


@pytest.mark.parametrize("name, c, ways, stream, rows", CASES + THOROUGH + [
    ("decode", 300, 64, 128, 1), ("decode", 300, 256, 128, 1)])
def test_the_models_shared_memory_holds_the_warps_exchange(name, c, ways, stream, rows):
    """The model's shared memory (M at level 1) counts the buffers through which the warps'
    states merge (across_warps.exchange_bytes: a value per warp and state variable, an online
    softmax's output row per warp, each buffer 16-byte aligned), so it holds what the kernel
    allocates, and the memory table lists them; before, 8 warps' softmax states were 48
    bytes past the model's count (the kernel allocated 64,064, the model 64,016 at c = 32000)."""
    from napkin.codegen.lower import lower
    from napkin.compiler.buffers import buffers
    p = _decode_split_over_warps(ways)[1] if name == "decode" else \
        forced(name, c, ways, stream, rows)[1]
    prog = lower(p)
    sizes = {param: p.sizes[axis] for param, axis in prog.size_params}
    split = [(k, kp) for k, kp in zip(prog.kernels, p.kernels)
             if kp.choice.split and kp.choice.split[1] > 32]
    assert split
    for k, kp in split:
        allocated, M = k.smem_bytes(sizes), kp.cost.levels[1].M
        rows_ = [b for b in buffers(p, kp) if b["role"] == "merged across warps"]
        assert rows_ and rows_[0]["shape"] == [["warps", kp.schedule.threads // 32]]
        assert allocated <= M <= allocated + 16 * (len(kp.model.arrays) + 4), (allocated, M)


@pytest.mark.thorough      # (attention's emulation: some 3 CPU-s)
def test_an_online_softmax_split_over_warps_along_its_keys():
    """Decode attention on the CUDA cores, the keys streamed and split over 64 lanes (two
    warps): each warp's (m, l) and rescaled output row merge through shared memory."""
    d, p = _decode_split_over_warps(64)
    from napkin.commands.run import random_inputs
    inputs = random_inputs(d, p.sizes, 3)
    out = run_plan(p, inputs, p.sizes)
    _ok(compare.against_reference(d, inputs, out, p))
    assert "xwi" in lowered(p)[1]


def test_the_warps_merge_after_a_barrier_and_every_lane_reads_the_group():
    """The emitted merge: shuffles of width 32 (never the split's width), each warp's state
    stored by its first lane between two barriers, the group's 4 warps folded in order from
    its first (two rows a block: the second group's first warp is the block's fifth)."""
    _, p = forced("softmax", 1000, 128, rows=2)
    text = lowered(p)[1]
    body = text[text.index("__global__"):]
    assert re.search(r"napkin_lanes_max\(\w+, 32\)", body)
    assert not re.search(r"napkin_lanes_\w+\([^;]*, 128\)", body)   # never wider than a warp
    merge = body[body.index("napkin_lanes_max"):]
    store = merge.index("if (tid % 32 == 0)")
    assert merge.index("__syncthreads();") < store < merge.index("__syncthreads();", store)
    assert "tid / 128 * 4" in merge and "xwi < 4" in merge


def _edit(pattern: str, replacement: str, count: int = 1):
    def edit(source: str) -> str:
        at = source.index("__global__")
        out, n = re.subn(pattern, replacement, source[at:], count=count)
        assert n == count
        return source[:at] + out
    return edit


def test_dropping_one_warps_state_is_caught():
    """Seeded: the last warp of each group left out of the merge."""
    verdicts = check("sums", 1000, 128, edit=_edit(r"xwi < 4;", "xwi < 3;", count=4))
    assert not all(v.ok for v in verdicts.values())


def test_a_group_reading_another_groups_warps_is_caught():
    """Seeded: each group of two rows a block reads the block's first warps."""
    verdicts = check("argmax", 129, 128, 128, rows=2,
                     edit=_edit(r"tid / 128 \* 4", "0", count=2))
    assert not all(v.ok for v in verdicts.values())


@pytest.mark.thorough      # (the thread sanitizer's build: some 5 CPU-s)
def test_a_dropped_barrier_before_the_warps_read_is_a_race():
    """Seeded: the barrier between the warps' stores and the group's reads removed."""
    d, p = forced("lse", 129, 128)

    def drop(source):
        at = source.index("}\n", source.index("if (tid % 32 == 0)", source.index("__global__")))
        rest = source[at:]
        return source[:at] + rest.replace("__syncthreads();", "/* dropped */", 1)
    inputs = _inputs("lse", 129, 1)
    with pytest.raises(NapkinError) as exc:
        run_plan(p, inputs, p.sizes, edit=drop, sanitize="thread")
    assert "race" in str(exc.value).lower()


def test_a_split_past_1024_lanes_is_refused():
    d = napkin.load(Source("<lse>", DIAGRAMS["lse"]))
    p = plan(d, "h100", {"r": ROWS, "c": 1000})
    with pytest.raises(NapkinError) as exc:
        with_choices(p, [dataclasses.replace(p.kernels[0].choice, split=("c", 2048))])
    assert "1024" in str(exc.value)


def test_the_lanes_hint_splits_a_reduced_axis_over_warps(rng):
    """`lanes={"c": 256}` (`--lanes c=256`) fixes the split the search takes (and keeps the
    row out of a split across blocks); the kernel it makes matches the reference."""
    d = napkin.load(Source("<softmax>", DIAGRAMS["softmax"]))
    p = plan(d, "h100", {"r": 5, "c": 1000}, overrides={"lanes": {"c": 256}})
    (kp,) = p.kernels
    assert kp.schedule.split == ("c", 256) and kp.schedule.threads == 256
    x = rng.standard_normal((5, 1000)).astype(np.float32)
    (y,) = napkin.run(d, x, backend="emulate", lanes={"c": 256})
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


TWO_ROWS = ("axis r, c, e\nin X[r c]: f32\nin Y[r e]: f32\nL[r] = sum[c](X)\n"
            "M[r] = max[e](Y) + L\nout M: f32\n")


def test_lanes_hints_on_two_reductions_keep_both(rng):
    """`--lanes c=64 --lanes e=128` on two statements fusion would join: each keeps its own
    split (the fused kernel's search took one hint and silently dropped the other), and the
    two kernels agree with the float64 reference at odd rows."""
    d = napkin.load(Source("<two>", TWO_ROWS))
    lanes = {"c": 64, "e": 128}
    p = plan(d, "h100", {"r": 5, "c": 33, "e": 170}, overrides={"lanes": lanes})
    assert sorted(kp.schedule.split for kp in p.kernels) == [("c", 64), ("e", 128)]
    x = (rng.standard_normal((5, 33)) * 3).astype(np.float32)
    y = (rng.standard_normal((5, 170)) * 3).astype(np.float32)
    (m,) = napkin.run(d, x, y, backend="emulate", lanes=lanes)
    want = y.astype(np.float64).max(axis=1) + x.astype(np.float64).sum(axis=1)
    np.testing.assert_allclose(m, want, rtol=1e-5, atol=1e-5)


def test_lanes_on_two_axes_of_one_reduction_or_beside_a_block_split_are_refused():
    """A kernel splits one reduced axis over lanes: two lanes hints on `sum[c e]` are N0604
    naming both (the second was dropped without a word); an axis split across blocks and
    over lanes is N0604 saying so (it said `no kernel has axis k`)."""
    two = napkin.load(Source("<sum2>", "axis r, c, e\nin X[r c e]: f32\nL[r] = sum[c e](X)\n"
                                        "out L: f32\n"))
    with pytest.raises(NapkinError) as exc:
        plan(two, "h100", {"r": 5, "c": 33, "e": 17}, overrides={"lanes": {"c": 64, "e": 64}})
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0604" and "`lanes e by 64` and `lanes c by 64`" in diag.message
    mm = napkin.load(Source("<mm>", "axis i, j, k\nin A[i k]: f32\nin B[k j]: f32\n"
                                    "C[i j] = A * B\nout C: f32\n"))
    with pytest.raises(NapkinError) as exc:
        plan(mm, "h100", {"i": 5, "j": 7, "k": 3000},
             overrides={"lanes": {"k": 64}, "split": {"k": 3}})
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0604" and "split across 3 blocks and over 64 lanes" in diag.message
    p = plan(mm, "h100", {"i": 5, "j": 7, "k": 3000},       # `split k by 1`: no split
             overrides={"lanes": {"k": 64}, "split": {"k": 1}})
    assert p.split is None and p.kernels[0].schedule.split == ("k", 64)


def test_explain_names_the_warps_of_a_split_and_refuses_other_lane_counts(capsys):
    from napkin.cli import main
    capsys.readouterr()
    args = ["explain", "softmax", "--shape", "r=5,c=1000"]
    assert main(args + ["--lanes", "c=256"]) == 0
    assert "c split over w_c = 256 threads (8 warps)" in capsys.readouterr().out
    assert main(args + ["--lanes", "c=48"]) != 0
    err = capsys.readouterr().err
    assert "N0304" in err and "1024" in err and "Traceback" not in err
    assert main(args + ["--lanes", "r=64"]) != 0
    err = capsys.readouterr().err
    assert "only reduced axes split over lanes" in err and "Traceback" not in err


def test_the_longest_accumulation_counts_a_warps_shuffles_then_the_other_warps():
    """The tolerance's sequential length (runtime/bound.py) of a sum over 1000 split over 256
    lanes: a lane's 4 terms, at most 32 additions of the warp's shuffles, 7 of the other warps
    (from 1000 / 32 + 32 = 64 over one warp: 32 + 32)."""
    from napkin.runtime import bound
    _, p = forced("lse", 1000, 256)
    assert bound.longest_accumulation(p) == 4 + 32 + 7
    _, p = forced("lse", 1000, 32)
    assert bound.longest_accumulation(p) == 32 + 32
