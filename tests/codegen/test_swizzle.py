"""The tensor-core tiles' shared layout (compiler/tilelayout.py, codegen/tiles.offset).

First the rule and its addresses, evaluated from the very C text the kernels print: every
tile position one-to-one, every 16-byte chunk whole (cp.async, the packed stores), and the
eight rows an ldmatrix phase reads in eight different 16-byte bank groups. Then the kernels
of each layout (swizzled rows of 2, 4, 8 and more chunks; plain rows of an odd number;
padded rows) on the CPU emulator against the float64 reference, at odd sizes next to tile
multiples: matmul in every operand layout, attention at head sizes 64, 128 and 48, causal
attention, the attention backward's chains and a split-K matmul.
"""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.tiles import offset
from napkin.compiler import memory, tilelayout
from napkin.compiler.plan import plan
from napkin.compiler.tilelayout import TileLayout, layout

from .conftest import library
from .test_chain import BIG as CHAIN_BIG, assert_gradient_matches, attention_inputs, chains
from .test_tensor_cores import (LAYOUTS, assert_close, flash_plan, on_tensor_cores, retiled,
                                tc_plan, with_static)


def evaluate(expr: str, **names) -> int:
    """A C integer expression of non-negative ints (tiles.offset's text) in Python."""
    return eval(expr.replace("/", "//"), {}, names)      # noqa: S307 - our own C text


def banks(lay: TileLayout, rows, col: int, lane=None) -> list[int]:
    """The 16-byte bank group (of the eight in 128 bytes) each row's chunk at `col` starts in."""
    return [evaluate(offset(lay, "r", "c", None if lane is None else "l"), r=r, c=col,
                     l=r % 8) * 2 // 16 % 8 for r in rows]


INNERS = range(8, 264, 8)


@pytest.mark.parametrize("inner, kind, shift, mask", [
    (8, "plain", 0, 0), (16, "swizzled", 2, 1), (24, "plain", 0, 0), (32, "swizzled", 1, 3),
    (40, "plain", 0, 0), (48, "padded", 0, 0), (64, "swizzled", 0, 7), (80, "padded", 0, 0),
    (96, "padded", 0, 0), (128, "swizzled", 0, 7), (192, "swizzled", 0, 7),
    (256, "swizzled", 0, 7)])
def test_the_rule_swizzles_rows_of_2_4_or_8n_chunks_and_pads_only_even_others(inner, kind,
                                                                               shift, mask):
    lay = layout(64, inner)
    assert (lay.kind, lay.shift, lay.mask) == (kind, shift, mask)
    assert lay.pitch == inner + (tilelayout.ROW_PAD if kind == "padded" else 0)
    # the planner's vectorised rule (M) agrees, candidate by candidate
    pads = tilelayout.row_pad(np.array(INNERS, dtype=float))
    assert list(pads) == [layout(64, i).pitch - i for i in INNERS]


@pytest.mark.parametrize("inner", INNERS)
def test_every_layout_is_one_to_one_keeps_chunks_whole_and_ldmatrix_conflict_free(inner):
    lay = layout(32, inner)
    at = {(r, c): evaluate(offset(lay, "r", "c"), r=r, c=c)
          for r in range(lay.outer) for c in range(inner)}
    assert len(set(at.values())) == len(at) and max(at.values()) < lay.count
    for (r, c), v in at.items():              # 8 values of a chunk stay together, in order
        if c % 8:
            assert v == at[(r, c - 1)] + 1
    for r0 in range(0, lay.outer, 8):         # an ldmatrix phase: 8 rows at one chunk column
        for col in range(0, inner, 8):
            assert len(set(banks(lay, range(r0, r0 + 8), col))) == 8, (r0, col)
            # the lane form (the row's term from its place within the 8: the kernels' tables)
            assert banks(lay, range(r0, r0 + 8), col, lane=True) == \
                banks(lay, range(r0, r0 + 8), col)


@pytest.mark.parametrize("inner", [16, 32])
def test_a_seeded_wrong_row_term_is_a_bank_conflict(inner):
    """The term of rows of 2 or 4 chunks without its shift (r % mask instead of (r >> shift)
    % mask), on both the stores and the reads: the values stay right (the emulator cannot
    see it) but two rows of a phase share a bank group, which this check catches."""
    right = layout(32, inner)
    wrong = TileLayout(right.axes, right.outer, right.inner, right.pitch, 0, right.mask)
    assert len(set(banks(right, range(8), 0))) == 8
    assert len(set(banks(wrong, range(8), 0))) < 8


def test_invariant_tables_hoist_what_reads_only_lanes_and_unrolled_indices():
    from napkin.codegen import program as P
    from napkin.codegen.builder import Builder
    b = Builder()
    b.emit(P.Decl("const int", "lane", "tid % 32"))
    b.hoist_here(("lane",))
    got = {}

    def inner(trips):
        def body():
            got[trips] = b.invariant("int", "(kk * 16) ^ lane", "sw")
            got["stage"] = b.invariant("int", "stage * 4 + lane", "sw")
        b.loop("kk", "0", str(trips), "1", body, unroll=True)
    b.loop("c0", "0", "n", "16", lambda: (inner(4), inner(2)))
    assert got[4] == "sw0[kk]" and got[2] == "sw1[kk]"       # the same text, its own trips
    assert got["stage"] == "stage * 4 + lane"                  # reads a loop's variable
    top = b.statements
    assert [type(x).__name__ for x in top] == ["Decl", "Decl", "For", "Decl", "For", "For"]
    assert top[1].shape == (4,) and top[3].shape == (2,) and top[-1].var == "c0"


def tiles_of(p) -> list:
    return [lay for kp in on_tensor_cores(p) for _, lay in kp.schedule.layouts]


def test_shared_memory_counts_the_unpadded_tiles():
    """The program allocates what the schedule's layouts say, and M counts no padding for
    swizzled tiles (matmul 4096^3: its A and B rows are 8 and 32 chunks long)."""
    d = library("matmul", "f16")
    p = plan(d, "a100", {"m": 4096, "k": 4096, "n": 4096})
    (kp,) = p.kernels
    (prog,) = lower(p).kernels
    stages = kp.schedule.stages
    lays = [lay for _, lay in kp.schedule.layouts]
    assert all(lay.kind == "swizzled" for lay in lays)
    tiles = sum(lay.outer * lay.inner * 2 * stages for lay in lays)
    assert prog.smem_bytes({}) == tiles
    assert tiles <= kp.cost.levels[1].M <= tiles + 2 * memory.ALIGN_PAD


def test_shared_memory_counts_the_padded_tiles():
    """A head size of 48 (6 chunks a row): Q's and K's rows padded, V's too (value width
    48), and the program's and M's bytes with them."""
    d = library("attention", "f16", d=48)
    p = flash_plan(d)
    (kp,) = p.kernels
    (prog,) = lower(p).kernels
    lays = [lay for _, lay in kp.schedule.layouts]
    assert [lay.kind for lay in lays] == ["padded"] * 3
    stages = kp.schedule.stages
    tiles = sum(lay.outer * lay.pitch * 2 * (1 if i == 0 else stages) for i, lay in enumerate(lays))
    assert prog.smem_bytes({}) <= tiles + 2 * 16 and tiles <= kp.cost.levels[1].M


def test_explain_prints_each_tiles_layout(capsys):
    import json
    import re
    from ..compiler.test_explain import run_cli
    args = ("explain", "attention", "--target", "a100", "--shape", "b=4,h=16,q=4096,x=4096")
    status, out, _ = run_cli(capsys, *args, "-D", "d=48")
    # (the query rows are the planner's choice: 128 on a100 since the copies of rows of six
    # 16-byte vectors are charged by their index, copies.TENSOR_INDEXED; the layout is
    # what is checked)
    assert status == 0 and re.search(r"shared tiles: Q \[\d+\]\[48\] padded \(rows of 56\)",
                                     out), out
    status, out, _ = run_cli(capsys, *args, "--json")
    tiles = json.loads(out)["kernels"][0]["engine"]["tiles"]
    assert [(t["array"], t["layout"], t["xor"]) for t in tiles] == \
        [(a, "swizzled", "16-byte chunk ^= row & 7") for a in "QKV"]


# -- on the emulator ---------------------------------------------------------------------------

ODD, MULTIPLE = {"m": 70, "k": 83, "n": 50}, {"m": 128, "k": 128, "n": 256}


@pytest.mark.parametrize("chunk, bm, wm, bn, wn, kinds", [
    (16, 64, 2, 8, 1, {(2, 1), (0, 0)}),         # A rows of 2 chunks; B rows of 1: plain
    (32, 32, 1, 16, 1, {(1, 3), (2, 1)}),        # 4 chunks; 2
    (64, 64, 2, 64, 2, {(0, 7)}),                # 8 and 8
    (32, 128, 2, 256, 4, {(1, 3), (0, 7)}),      # 4; 32 (the XOR on each 128-byte group)
])
@pytest.mark.parametrize("shape", [ODD, MULTIPLE])
def test_matmul_in_each_swizzle(chunk, bm, wm, bn, wn, kinds, shape):
    d = library("matmul", "f16")
    p = retiled(tc_plan(d), chunk, {"m": (bm, wm), "n": (bn, wn)})
    assert {(lay.shift, lay.mask) for lay in tiles_of(p)} == kinds
    assert_close(d, p, shape, seed=chunk + bm)


@pytest.mark.parametrize("name", ["A[k m], B[k n]", "A[m k], B[n k]", "A[k m], B[n k]"])
def test_matmul_operand_layouts_swizzled_both_ways(name):
    """.trans ldmatrix reads of a swizzled tile (A[k m]: rows of k, m contiguous)."""
    d = napkin.load(LAYOUTS[name].format(t="bf16"))
    p = retiled(tc_plan(d), 32, {"m": (64, 2), "n": (32, 2)})
    assert {lay.kind for lay in tiles_of(p)} == {"swizzled"}
    for shape in (ODD, {"m": 64, "k": 96, "n": 64}):
        assert_close(d, p, shape)


@pytest.mark.parametrize("head, kinds, causal", [
    (64, {"swizzled"}, False), (64, {"swizzled"}, True), (128, {"swizzled"}, False),
    (48, {"padded"}, False),
    # (the causal loop of the other heads: the same layouts, the thorough tier's)
    pytest.param(128, {"swizzled"}, True, marks=pytest.mark.thorough),
    pytest.param(48, {"padded"}, True, marks=pytest.mark.thorough)])
def test_attention_swizzled_and_padded(head, kinds, causal):
    d = library("causal_attention" if causal else "attention", "f16", d=head)
    p = flash_plan(d)
    assert {lay.kind for lay in tiles_of(p)} == kinds
    for q, x in ((37, 70), (64, 128)):
        assert_close(d, p, with_static(d, {"b": 1, "h": 2, "q": q, "x": x}), seed=head + q)


def test_attention_with_plain_value_rows():
    """A value width of 40 (5 chunks: plain rows) beside a swizzled head of 32."""
    text = ("axis b, q, x\naxis d = 32\naxis e = 40\nin Q[b q d]: f16\nin K[b x d]: f16\n"
            "in V[b x e]: f16\nS[b q x] = Q * K * 0.2\nP[b q x] = softmax[x](S)\n"
            "O[b q e] = P * V\nout O: f16")
    d = napkin.load(text)
    p = plan(d, "h100", {"b": 4, "q": 4096, "x": 4096})
    kinds = {lay.axes[1]: lay.kind for lay in tiles_of(p)}
    assert kinds == {"d": "swizzled", "e": "plain"}
    assert_close(d, p, with_static(d, {"b": 2, "q": 41, "x": 77}))


@pytest.mark.parametrize("head", [64, 48])
@pytest.mark.parametrize("wrt", ["Q", "K,V"])
def test_attention_backward_chains_swizzled_and_padded(head, wrt):
    d = napkin.grad("causal_attention", wrt=tuple(wrt.split(",")), saved=True, d=head)
    p = plan(d, "h100", CHAIN_BIG)
    (kp,) = chains(p)
    assert {lay.kind for _, lay in kp.schedule.layouts} == \
        {"swizzled" if head == 64 else "padded"}
    shape = {"b": 1, "h": 1, "q": 77, "x": 130}
    inputs, want = attention_inputs(shape, head, True, seed=head)
    assert_gradient_matches(d, p, shape, inputs, want)


def test_a_split_window_of_whole_vectors_in_rows_of_odd_length():
    """k=77 in 5 parts: each window is 16 values (two 16-byte vectors) but A's rows are 77
    long, so a window's vectors start off 16 bytes (the copy took the window's size alone:
    cp.async misaligned, N0902 on the emulator); k=80 keeps the vector copy, and agrees."""
    d = library("matmul", "f16")
    p = plan(d, "h100", {"m": 16, "k": 65536, "n": 512}, {"split": {"k": 5}})
    assert p.split is not None and p.split.parts == 5
    for shape in ({"m": 3, "k": 77, "n": 600}, {"m": 3, "k": 80, "n": 61}):
        assert_close(d, p, shape)


def test_split_k_matmul_on_swizzled_tiles():
    """k split across blocks (compiler/split.py): each block's window of k is copied one
    value at a time into the swizzled tile (the window's rows), then the parts merged."""
    d = library("matmul", "f16")
    p = plan(d, "h100", {"m": 256, "k": 8192, "n": 256}, {"split": {"k": 3}},
             engine="tensor-cores")
    assert p.split is not None
    assert {lay.kind for lay in tiles_of(p)} == {"swizzled"}
    for shape in ({"m": 33, "k": 301, "n": 17}, {"m": 64, "k": 384, "n": 64}):
        assert_close(d, p, shape)
