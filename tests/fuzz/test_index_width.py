"""Index width: at sizes whose element counts or offsets reach 2^31 (planned, never
allocated), every integer expression of every kernel fits the chosen index type (an
independent range analysis, widths.py), and the PTX computes in 64 bits when it must."""

from __future__ import annotations

import dataclasses
import math
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import napkin
from napkin.codegen import program as P
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names
from napkin.runtime import nvrtc
from napkin.runtime.launches import size_values

from .widths import check_kernel

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))
EDGE = 2**31
ELEMENTWISE = "axis a\nin X[a]: f32\nY[a] = X * 2\nout Y: f32\n"
SUM = "axis a\nin X[a]: f32\nY[] = sum[a](X)\nout Y: f32\n"
STATIC_MATMUL = ("axis m = {m}, k = {k}, n = 64\nin A[m k]: f16\nin B[k n]: f16\n"
                 "C[m n] = A * B\nout C: f16\n")

CASES = [
    (ELEMENTWISE, {"a": EDGE - 1}), (ELEMENTWISE, {"a": EDGE}), (ELEMENTWISE, {"a": EDGE - 2000}),
    (SUM, {"a": EDGE - 1}), (SUM, {"a": EDGE - 2000}), (SUM, {"a": 3 * EDGE}),
    ("axis a = 2147483647\nin X[a]: f32\nY[a] = X * 2\nout Y: f32\n", {}),
    (STATIC_MATMUL.format(m=65536, k=32767), {}), (STATIC_MATMUL.format(m=65536, k=32768), {}),
    ("matmul", {"m": 65536, "k": 32768, "n": 64}), ("matmul", {"m": 46341, "k": 46341, "n": 3}),
    ("softmax", {"r": 2**16, "c": 2**15}), ("softmax", {"r": 2**16 - 1, "c": 2**15 + 1}),
    ("layernorm", {"r": 2**17, "c": 2**14 - 1}), ("layernorm", {"r": 2**20, "c": 2**11}),
    # a tile of rows past the last row of X [2^30 - 1, 2]: offsets past 2^31 (row x stride)
    ("swiglu", {"t": 2**30 - 1, "m": 2, "f": 1, "o": 1}), ("rmsnorm", {"r": 2**30 - 1, "c": 2}),
    ("attention", {"b": 1, "h": 1, "q": 2**25, "x": 7}), ("attention", {"b": 2, "h": 4, "q": 2**22 - 1, "x": 9}),
    ("causal_attention", {"b": 1, "h": 2, "q": 2**24, "x": 2**24}),
    ("gqa_attention", {"b": 1, "g": 2, "r": 4, "q": 2**22, "x": 33}),
]


def problems_of(d, shape) -> tuple[list, list]:
    p = plan(d, "h100", shape)
    program = lower(p)
    sizes = size_values(program, p.sizes)
    found = [f"{k.name}: {msg}" for k in program.kernels for msg in check_kernel(k, sizes)]
    return found, [k.index_type for k in program.kernels]


@pytest.mark.parametrize("text, shape", CASES, ids=[f"{t.split()[0] if chr(10) not in t else t.split(chr(10))[0][:20]}-{s}"
                                                    for t, s in CASES])
def test_every_index_expression_fits_its_type(text, shape):
    found, _ = problems_of(napkin.load(text), shape)
    assert not found, found[:5]


@st.composite
def near_the_edge(draw):
    name = draw(st.sampled_from(library_names()))
    d = napkin.load(name)
    dynamic = [a for a, s in d.axes.items() if s is None]
    reps = {a: d.ir.graph["axes"][a].rep for a in dynamic}    # one size per size class
    drawn = {r: draw(st.integers(1, 300)) for r in dict.fromkeys(reps.values())}
    shape = {a: drawn[reps[a]] for a in dynamic}
    target = draw(st.sampled_from([EDGE - 1, EDGE, EDGE + 1])) + draw(st.integers(-4096, 4096))
    axis = draw(st.sampled_from(dynamic))
    # the largest input gets about `target` elements by sizing one of its axes
    sig = max(d.inputs, key=lambda s: s.axes.count(axis) and math.prod(
        shape.get(a, d.axes[a] or 1) for a in s.axes))
    others = math.prod(shape.get(a, d.axes[a] or 1) for a in sig.axes if a != axis) or 1
    if axis in sig.axes:
        size = max(1, target // others)
        shape.update((a, size) for a in dynamic if reps[a] == reps[axis])
    return d, shape


@settings(max_examples=max(1, int(25 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(near_the_edge())
def test_random_shapes_at_the_edge(case):
    d, shape = case
    found, _ = problems_of(d, shape)
    assert not found, (d.name, shape, found[:5])


def narrowed(p):
    """The plan with every kernel's index type forced to `int` (Schedule.index): a seeded
    overflow where the sizes need 64 bits."""
    return dataclasses.replace(p, kernels=tuple(
        dataclasses.replace(kp, schedule=dataclasses.replace(kp.schedule, index="int"))
        for kp in p.kernels))


def _ptx(d, force_int: bool = False) -> str:
    # the CUDA-core kernel: a tensor-core one also widens its 32-bit shared-memory offsets
    # (tiles of a few KiB) into generic pointers, which this PTX test cannot tell apart
    p = plan(d, "h100", {}, engine="cuda-cores")
    if force_int:
        p = narrowed(p)
    return nvrtc.compile(render(lower(p)), arch="sm_90", want_cubin=False).ptx


def test_ptx_computes_offsets_in_64_bits_when_it_must():
    """A matmul with 2^32 elements in A (static sizes): the kernel indexes with `long long`;
    forced to `int`, the range analysis finds the overflow. The PTX of the first computes its
    offsets in 64 bits (add/mul/mad .s64, no 32-bit index widened by mul.wide.s32); the
    second widens 32-bit indices."""
    d = napkin.load(STATIC_MATMUL.format(m=131072, k=32768))   # a row offset passes 2^31
    found, types = problems_of(d, {})
    assert not found and types == ["long long"]
    p = narrowed(plan(d, "h100", {}))
    program = lower(p)
    found = [x for k in program.kernels for x in check_kernel(k, size_values(program, p.sizes))]
    assert found
    # on tensor cores, the 16-byte copies' global offsets are checked too: each thread's
    # first source (`cps = pN + (offset)`) and its steps (call arguments)
    assert p.kernels[0].choice.warps
    assert any("cps = " in x or "napkin_cp_async_16 argument" in x for x in found), found
    if not nvrtc.available():
        return
    wide = re.compile(r"\b(?:add|mul\.lo|mad\.lo)\.s64\b")
    # a 32-bit index widened to a byte offset (not the thread's index to its 16-byte vector
    # of a copy, codegen/staging.py: tid is 32-bit in every kernel, and nvcc knows it)
    narrow = re.compile(r"\bmul\.wide\.s32\s+%rd\d+, %r\d+, (?!16;)")
    ptx64, ptx32 = _ptx(d), _ptx(d, force_int=True)
    assert not narrow.search(ptx64) and len(wide.findall(ptx64)) > len(wide.findall(ptx32))
    assert narrow.search(ptx32)


def test_the_block_index_is_32_bit_unsigned_while_the_tiles_fit():
    """index_width.block_type: `unsigned` while a grid's tiles number at most 2^31 - 1 (the
    index and the grid's stride stay below 2^32) in a kernel indexing in 32 bits on the CUDA
    cores, else `long long`; the lowering declares the
    blocks' loop with it, and the range analysis checks it as unsigned."""
    from napkin.compiler.index_width import block_type
    assert block_type({"a": EDGE - 1, "b": 3}, (("a", 1), ("b", 3))) == "unsigned"
    assert block_type({"a": EDGE - 1, "b": 6}, (("a", 1), ("b", 3))) == "long long"
    assert block_type({"a": 5 * EDGE}, (("a", 4),)) == "long long"
    assert block_type({"a": 7}, (("a", 1),), "long long") == "long long"
    # tensor-core kernels keep 64-bit origins (hoisted reciprocals spilled a d = 128 chain)
    assert block_type({"a": 7}, (("a", 1),), "int", tensor_cores=True) == "long long"
    (mm,) = plan(napkin.load("matmul"), "h100", {"m": 300, "n": 260, "k": 96}).kernels
    assert mm.schedule.tensor_cores and mm.schedule.blocks == "long long"
    p = plan(napkin.load("attention"), "h100", {"b": 3, "h": 5, "q": 77, "x": 9},
             engine="cuda-cores")
    program = lower(p)
    for k, kp in zip(program.kernels, p.kernels):
        assert kp.schedule.blocks == "unsigned"
        loop = next(s for s in k.body if isinstance(s, P.For) and s.var == "blk")
        assert loop.ctype == "unsigned"
    # forced to unsigned where the tiles pass 2^32, the range analysis finds the overflow
    long = P.For("blk", "(unsigned)blockIdx.x", "blk < nblocks", "blk += (unsigned)gridDim.x",
                 (), False, "unsigned")
    k = dataclasses.replace(program.kernels[0], body=(
        P.Decl("const long long", "nblocks", "(long long)(n0) * (long long)(n0)"), long))
    assert not check_kernel(k, {"n0": 2**15})
    assert any("blk" in x for x in check_kernel(k, {"n0": 2**16 + 1}))


def _row_subscript(k, origin: str, rows: int, width: int) -> "P.KernelProgram":
    """A kernel whose thread reads row min(base_0 + 1, n0 - 1) of a shared tile of `width`
    columns, relative to `origin`: a block of `rows` rows from org_0 (as kernel.py lowers it:
    org_0 from the block index, base_0 = org_0 + tc_0 * 1; org_1 another axis's origin)."""
    clamped = "((base_0 + 1) < (int)(((int)(n0)) - 1) ? (base_0 + 1) : (int)(((int)(n0)) - 1))"
    read = f"sm0[((int)(({clamped} - {origin}))) * ({width}) + (j0)]"
    body = (P.Decl("const int", "tc_0", "(int)threadIdx.x % 2"),
            P.For("blk", "(unsigned)blockIdx.x", "blk < (unsigned)(n0)",
                  "blk += (unsigned)gridDim.x", (
                      P.Decl("const int", "org_0",
                             f"(int)((blk) % ((unsigned)((n0 + {rows - 1}) / {rows}))) * {rows}"),
                      P.Decl("const int", "org_1", "(int)((blk) % ((unsigned)(n0)))"),
                      P.Decl("const int", "base_0", "org_0 + tc_0 * 1"),
                      P.For("j0", "0", f"j0 < {width}", "++j0", (
                          P.Decl("const float", "x", read),))), False, "unsigned"))
    return dataclasses.replace(k, body=body)


def test_a_shared_row_is_read_relative_to_its_block_origin(monkeypatch):
    """A shared tile's row is read as (min(base_0 + i, n0 - 1) - org_0) * width + j, base_0 =
    org_0 + tc_0 * t (kernel.py): its row lies in [0, rows) whatever the block, which the range
    analysis (widths.py) proves by relating base_0 to org_0; as two unrelated intervals,
    [-(n0 - 1), n0 - 1] x width passes 2^31 at n0 = 2^17, width 16392 (a false alarm on
    layernorm's statistics kernel apart from Y at r = 2^17, c = 2^14 - 1, one row a block).
    Blocks of 8 rows: the row from its block's origin is 0 to 2 (tc_0 0 or 1, plus 1), the
    subscript at most 3 x width - 1, in range to the last width that keeps it so; a row taken
    from another axis's origin is not related, and an overflow."""
    from . import widths
    k = lower(plan(napkin.load(SUM), "h100", {"a": 1000})).kernels[0]
    n, edge = {"n0": 2**17}, 2**31 // 3
    assert not check_kernel(_row_subscript(k, "org_0", 8, 2**14 + 8), n)
    assert check_kernel(_row_subscript(k, "org_1", 8, 2**14 + 8), n)
    assert not check_kernel(_row_subscript(k, "org_0", 8, edge), n)
    assert check_kernel(_row_subscript(k, "org_0", 8, edge + 1), n)
    monkeypatch.setattr(widths, "_relate", lambda s, env, const: None)
    assert check_kernel(_row_subscript(k, "org_0", 8, 2**14 + 8), n)


def test_layernorms_statistics_apart_read_their_row_in_range(monkeypatch):
    """layernorm at r = 2^17, c = 2^14 - 1 on h100: the statistics apart from Y (fusion's full
    search prices that 5.44 ms against 5.56 ms fused, model figures: confirm.py). Their kernel
    holds one row of X a block in shared memory, padded to 16392 values, and indexes in 32
    bits: the row is min(base_0, n0 - 1) - org_0 = 0 (base_0 is org_0, below n0), each
    subscript below 16392 + 8, which the range analysis proves (and without relating base_0
    to org_0, flags: [-(n0 - 1), n0 - 1] x 16392 passes 2^31)."""
    from . import widths
    p = plan(napkin.load("layernorm"), "h100", {"r": 2**17, "c": 2**14 - 1})
    program = lower(p)
    sizes = size_values(program, p.sizes)
    (stats,) = [k for k in program.kernels
                if {q.array for q in k.params if q.role == "store"} == {"mu", "var"}]
    assert stats.index_type == "int" and stats.blocks == (("n0", 1),)
    assert not check_kernel(stats, sizes)
    monkeypatch.setattr(widths, "_relate", lambda s, env, const: None)
    assert any("acc0 subscript: 32-bit" in x for x in check_kernel(stats, sizes))
