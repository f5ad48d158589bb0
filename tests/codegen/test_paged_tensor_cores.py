"""Paged attention on tensor cores: K and V rows gathered through a page table (compiler/
rowsource.py, codegen/tiles._element), emitted and run on the CPU emulator against the
float64 oracle, and the refusals of what the copy cannot read."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import flash, tensorcore
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError
from napkin.pipeline import run_plan
from napkin.runtime import compare, reference

from .conftest import library

HEAD = 64                # the library diagram's d


def _inputs(dtype: str, b: int, g: int, r: int, n: int, P: int, j: int, x: int, rng) -> dict:
    """Random queries and cache, each sequence's pages a random permutation of the cache's
    (spare pages unused), lengths 0, past x, and inside x, at a page's edge or not."""
    dt = {"f16": np.float16, "bf16": __import__("ml_dtypes").bfloat16}[dtype]
    table = rng.permutation(n)[:b * j].reshape(b, j).astype(np.int32)
    lengths = [x - 5, 0, x + 7, P, x, P + 1, 1, x - P - 3][:b]
    return {"Q": rng.standard_normal((b, g, r, 1, HEAD)).astype(dt),
            "Kc": rng.standard_normal((n, P, g, HEAD)).astype(dt),
            "Vc": rng.standard_normal((n, P, g, HEAD)).astype(dt),
            "pages": table, "len": np.array(lengths, dtype=np.int32)}


def _check(P: int, x: int, dtype: str, r: int, split: int | None, b: int = 3, g: int = 2,
           seed: int = 0):
    j = -(-x // P)
    d = library("paged_attention", dtype, x=x, j=j, P=P)
    n = b * j + 3
    shape = dict(b=b, g=g, r=r, q=1, n=n)
    p = plan(d, "h100", shape, overrides={"split": {"x": split}} if split else None,
             engine="tensor-cores")
    assert p.kernels[0].schedule.engine == "attention", p.kernels[0].schedule.engine
    assert (p.split.parts if p.split else None) == split
    # x not a multiple of the chunk, nor of the page: the last chunk and page are partial
    assert x % p.kernels[0].schedule.stream[1] and x % P
    inputs = _inputs(dtype, b, g, r, n, P, j, x, np.random.default_rng(seed))
    out = run_plan(p, inputs, p.sizes)
    ref, low = reference.evaluate(d, inputs), reference.evaluate(d, inputs, precision="lowp")
    verdict = compare.check(out["O"], ref["O"], low["O"], dtype, "O")
    assert verdict.ok, verdict.message
    assert np.all(out["O"][1] == 0)          # len 0: no key, a row of zeros as the reference
    return p


# (page size, keys, dtype, query heads a key/value head, splits; b, g): pages of 16 and of
# sizes that are not a chunk's multiple (8, 24), GQA r = 4 and r = 1, split and unsplit (r = 1
# unsplit is never fused at emulator sizes: its scores are their own kernel)
CASES = [
    (16, 37, "f16", 4, None, 3, 2),
    (8, 100, "bf16", 4, None, 8, 8),           # (unsplit: the planner fuses at these sizes)
    (24, 77, "f16", 1, 4, 3, 2),
    (8, 150, "bf16", 4, 5, 3, 2),
    pytest.param(16, 130, "f16", 1, 3, 3, 2, marks=pytest.mark.thorough),
    pytest.param(16, 99, "bf16", 1, 3, 4, 3, marks=pytest.mark.thorough),
    pytest.param(24, 77, "bf16", 4, 2, 5, 2, marks=pytest.mark.thorough),
    pytest.param(8, 61, "f16", 4, 7, 8, 1, marks=pytest.mark.thorough),
]


@pytest.mark.parametrize("P, x, dtype, r, split, b, g", CASES)
def test_paged_attention_on_tensor_cores_matches_the_oracle(P, x, dtype, r, split, b, g):
    _check(P, x, dtype, r, split, b, g)


def test_each_round_of_the_copy_reads_the_page_table_once_for_a_row():
    """The K and V tiles are copied 16 bytes at a time (cp.async), each copy's row offset
    computed through the page table: one read of it per copy round of a tile (a row's 16-byte
    segments share the thread's round), none per value; the split's rows past x zero-filled
    (src-size 0) by the key's test."""
    d = library("paged_attention", "f16", x=150, j=19, P=8)
    p = plan(d, "h100", dict(b=3, g=2, r=4, q=1, n=60), overrides={"split": {"x": 5}},
             engine="tensor-cores")
    cuda = napkin.pipeline.lowered(p)[1]
    kernel = cuda[cuda.index("napkin_k0("):cuda.index("napkin_k1(")]
    rounds = kernel.count("napkin_cp_async_16(")
    reads = kernel.count("p3[")
    assert rounds and reads == rounds - 1            # every copy of K and V but Q's one
    assert "(int)(150)) ? 16 : 0" in kernel           # zeros past x in the last split


def test_the_planner_puts_the_decode_partial_on_tensor_cores():
    """At b = 8, g = 8, r = 4, q = 1, n = 4096, d = 128 (x = 4096 keys) the split's partial
    runs on tensor cores, faster by the model than the CUDA-core plan (58.2 us before)."""
    d = napkin.load("paged_attention", d=128)
    shape = dict(b=8, g=8, r=4, q=1, n=4096)
    p = plan(d, "h100", shape)
    simt = plan(d, "h100", shape, engine="cuda-cores")
    assert p.split is not None and p.kernels[0].schedule.engine == "attention"
    assert simt.kernels[0].schedule.engine == "cuda cores"
    assert sum(k.cost.time for k in p.kernels) < sum(k.cost.time for k in simt.kernels)
    kp = p.kernels[0]
    assert kp.model.gathered and kp.model.positions      # the page table read per row


GATHER_D = """\
axis b, g, r, q, n
axis d = 64
axis P = 16
axis x = 64
axis j = 4
in Q[b g r q d]: {dtype}
in Kc[n P g d]: {dtype}
in Vc[n P g d]: {dtype}
in pages[b j]: i32
in perm[d]: i32
S[b g r q x] = Q * Kc[pages[b (x // size(P))] mod(x, size(P)) g {kd}] / sqrt(size(d))
O[b g r q d] = softmax[x](S) * Vc[pages[b (x // size(P))] mod({vx}, size(P)) g d]
out O: {dtype}
"""


@pytest.mark.parametrize("kd, vx, dtype, why", [
    ("perm[d]", "x", "f16", "gathered along `d`"),
    ("d", "x", "f32", "mma.sync takes one 16-bit dtype"),
])
def test_what_the_copy_cannot_read_stays_on_cuda_cores_with_a_reason(kd, vx, dtype, why):
    """A gather along the head (its rows not contiguous), positions varying along a query
    axis (a row per key of the block), an f32 cache: refused with a reason, which --engine
    tensor-cores reports; the planner keeps the CUDA cores."""
    text = GATHER_D.format(kd=kd, vx=vx, dtype=dtype)
    d = napkin.load(text)
    shape, split = dict(b=2, g=2, r=4, q=1, n=9), {"split": {"x": 3}}   # (fused)
    p = plan(d, "h100", shape, split)
    kp = next(k for k in p.kernels if k.model.streaming.pairs)
    found = tensorcore.examine(p.graph, kp.kernel, kp.model, p.target, p.sizes)
    assert isinstance(found, str) and why in found, found
    assert isinstance(flash.examine(p.graph, kp.kernel, kp.model, p.target, p.sizes), str)
    assert kp.schedule.engine == "cuda cores"
    with pytest.raises(NapkinError) as exc:
        plan(d, "h100", shape, split, engine="tensor-cores")
    assert exc.value.diagnostics[0].code == "N0606" and why in exc.value.diagnostics[0].message


def test_values_gathered_along_a_query_axis_make_it_a_batch_axis():
    """`Vc[... mod(x + r, size(P)) g d]`: the values' rows vary along the query heads r, so
    the fragment rows run along q alone (flash.own_rows) and r is a batch axis, one position
    per block, whose gathered tile of values is its own; emulated against the reference."""
    d = napkin.load(GATHER_D.format(kd="d", vx="x + r", dtype="f16"))
    shape = dict(b=2, g=2, r=4, q=3, n=9)
    p = plan(d, "h100", shape, {"split": {"x": 3}}, engine="tensor-cores")
    site = next(kp.schedule.site for kp in p.kernels if kp.model.streaming.pairs)
    assert site.row == "q" and "r" in site.batch and not site.packed
    inputs = random_inputs(d, shape, 5)
    inputs["pages"] = np.random.default_rng(5).integers(0, 9, (2, 4)).astype(np.int32)
    for v in compare.against_reference(d, inputs, run_plan(p, inputs, shape), plan=p).values():
        assert v.ok, v.message


def test_keys_gathered_along_the_query_rows_are_refused_with_the_axis():
    """Keys picked per query (`K[b (idx[q x]) d]`: every row of the block its own keys) have
    no tile of keys the block's rows share: the reason names the axis, not a generic one."""
    d = napkin.load("axis b, h, q, x, n\naxis d = 64\nin Q[b h q d]: f16\n"
                    "in K[b h n d]: f16\nin V[b h n d]: f16\nin idx[q x]: i32\n"
                    "S[b h q x] = Q * K[b h (idx[q x]) d] / sqrt(size(d))\n"
                    "O[b h q d] = softmax[x](S) * V[b h (idx[q x]) d]\nout O: f16\n")
    shape = {"b": 2, "h": 3, "q": 37, "x": 45, "n": 70}
    with pytest.raises(NapkinError) as exc:
        plan(d, "h100", shape, engine="tensor-cores")
    message = exc.value.diagnostics[0].message
    assert "gathered at positions that vary along `q`" in message, message
    assert plan(d, "h100", shape).kernels[0].schedule.engine == "cuda cores"
