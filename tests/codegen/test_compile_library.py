"""Every library kernel compiles with NVRTC for sm_80 and sm_90a: no spills, shared memory
within the plan's estimate; the emitted CUDA is deterministic and reviewed as goldens."""

from __future__ import annotations

import os
import re

from pathlib import Path

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names
from napkin.runtime import binaries, nvrtc

from .conftest import library, shape_of

GOLDENS = Path(__file__).parent / "goldens"


# f16 for every other library diagram, at its planning-default sizes (the plan that ships,
# with the largest tiles) on sm_90 in CI; with NAPKIN_FUZZ_SCALE >= 2 every diagram, also at
# the test shape, on sm_80 too, and f32 (CUDA cores only: the same programs but for the
# storage type). Each NVRTC compile is 1-3 CPU-s, the largest part of this file's time; in CI
# every library diagram's kernels are also compiled and checked for spills, at odd sizes in
# one dtype each, by benchmarks/gpu_check.py's dry run (tests/runtime/test_gpu_scripts.py).
ALL = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2
CASES = [(n, "f16") for i, n in enumerate(library_names()) if ALL or i % 2 == 0] + \
    ([(n, "f32") for n in library_names()] if ALL else [])


@pytest.mark.parametrize("name, dtype", CASES)
def test_compiles_without_spills_within_the_plans_shared_memory(name, dtype):
    d = library(name, dtype)
    seen = {}
    for shape in ({}, shape_of(d)) if ALL else ({},):
        p = plan(d, "h100", shape)
        prog = lower(p)
        source = render(prog)
        sizes = {param: p.sizes[axis] for param, axis in prog.size_params}
        names = [k.name for k in prog.kernels]
        assert names == [f"napkin_k{i}" for i in range(len(names))]
        # f16 on both architectures; f32 (CUDA cores only, no arch-specific instructions) on one
        # (sm_80 at the default shape only: its register allocation follows sm_90's); h100's
        # own arch is sm_90a, where its plans' products run on wgmma (compiler/wgmma.py)
        # (a program on wgmma is sm_90a's alone: for sm_80 its wrappers compile to a trap)
        own = p.target.arch
        both = ALL and dtype != "f32" and not shape and not any(k.wgmma for k in prog.kernels)
        for arch in ("sm_80", own) if both else (own,):
            if (source, arch) not in seen:      # the same kernels at both shapes: compiled once
                # through the kernel cache (runtime/binaries.py: keyed by the source, the code
                # generator's hash, NVRTC's version and the arch; what NVRTC and ptxas said)
                seen[source, arch] = binaries.get(source, arch)
            compiled = seen[source, arch]
            # the PTX defines exactly the kernels the program declares (no extra entry)
            entries = nvrtc.Compiled(compiled.ptx, compiled.cubin, compiled.log, arch, ()).kernels
            assert sorted(entries) == sorted(names), (arch, entries)
            for k, kp in zip(prog.kernels, p.kernels):
                r = compiled.resources[k.name]
                assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (arch, k.name, r)
                assert r["smem_bytes"] + k.smem_bytes(sizes) <= kp.cost.levels[1].M, (k.name, r)
                assert r["registers"] <= 255


@pytest.mark.parametrize("name", library_names())
def test_golden_cuda(name, golden):
    d = napkin.load(name)
    first = render(lower(plan(d, "h100")))
    again = render(lower(plan(napkin.load(name), "h100")))
    assert first == again
    golden(GOLDENS / f"{name}.cu", first)


def test_only_generated_identifiers_reach_the_c():
    text = ("axis Batch_Axis, Query_Axis, Key_Axis\naxis Head_Dim = 8\n"
            "in Query_Tensor[Batch_Axis Query_Axis Head_Dim]: f16\n"
            "in Key_Tensor[Batch_Axis Key_Axis Head_Dim]: f16\n"
            "Scores_Array[Batch_Axis Query_Axis Key_Axis] = Query_Tensor * Key_Tensor\n"
            "Probs_Array[Batch_Axis Query_Axis Key_Axis] = softmax[Key_Axis](Scores_Array)\n"
            "out Probs_Array: f16")
    source = render(lower(plan(napkin.load(text), "h100")))
    for word in ("Batch_Axis", "Query", "Key_", "Head_Dim", "Scores", "Probs", "Tensor"):
        assert word not in source
    assert '#line 6 "napkin-diagram"' in source


@pytest.mark.parametrize("tensor_cores", [False, True])
def test_causal_attention_skips_fully_masked_key_chunks(tensor_cores):
    causal = render(lower(plan(napkin.load("causal_attention"), "h100", engine="auto" if tensor_cores else "cuda-cores")))
    plain = render(lower(plan(napkin.load("attention"), "h100", engine="auto" if tensor_cores else "cuda-cores")))
    # the chunk's first key against the block's last query, in 64-bit integers: SIMT skips
    # the chunk in its loop; the tensor-core kernel tests every chunk so in its prologue
    # (masks.index_span) and its loop runs from the first to the last chunk that may hold,
    # with no test of its own (one band: none between them is hidden)
    first = "(long long)(dc)" if tensor_cores else "(long long)(c0)"
    test = f"{first} <= (long long)("
    assert test in causal and test not in plain
    skip = "continue;" if not tensor_cores else "if (!(!("
    assert skip in causal and skip not in plain
    if tensor_cores:
        assert re.search(r"for \((int|long long) c0 = cfirst; c0 < cfull;", causal)
        assert not re.search(r"if \(!\(!\(.*\(long long\)\(c0", causal)   # no skip in the loop


def test_sliding_window_skips_on_both_sides():
    text = ("axis b, h, q, x\naxis d = 64\nin Q[b h q d]: f16, K[b h x d]: f16, V[b h x d]: f16\n"
            "S[b h q x] = where(x <= q and q - x < 256, Q * K / sqrt(size(d)), -inf)\n"
            "P[b h q x] = softmax[x](S)\nO[b h q d] = P * V\nout O: f16")
    for tensor_cores in (False, True):
        # (each engine forced: both lowerings skip on both sides)
        source = render(lower(plan(napkin.load(text), "h100", {"b": 1, "h": 8, "q": 8192, "x": 8192},
                                   engine="tensor-cores" if tensor_cores else "cuda-cores")))
        # one test per chunk loop (the tensor-core kernel's in its prologue over the chunks,
        # masks.index_span, which bounds its loop on both sides)
        chunk = "(long long)(dc)" if tensor_cores else "(long long)(c0)"
        skips = {line.strip() for line in source.splitlines() if chunk in line
                 and ("if (!(!(" in line or "continue;" in line)}
        (skip,) = skips
        assert "&&" in skip and "256" in skip
        assert ("continue;" in skip) == (not tensor_cores)


def test_index_width_follows_the_sizes(compiled):
    small = lower(plan(napkin.load("matmul"), "h100", {"m": 512, "k": 512, "n": 512}))
    large = lower(plan(napkin.load("matmul"), "h100", {"m": 65536, "k": 65536, "n": 8}))
    assert small.kernels[0].index_type == "int"
    assert large.kernels[0].index_type == "long long"
    ptx = compiled(render(large), "sm_90").ptx
    assert "mul.lo.s64" in ptx or "mul.wide" in ptx or "mad.lo.s64" in ptx


def test_an_index_past_the_last_row_counts_its_stride():
    """A tile of 256 rows past the last of X [2^30 - 1, 2] computes offsets up to
    (2^30 + 254) x 2 before the bound test stops its loads: past 2^31, so 64-bit indices,
    although every array and every axis alone fits in an int; at 2^29 rows it fits."""
    from napkin.compiler.cost import Choice
    from napkin.compiler.index_width import wide
    tile = Choice(group=(("t", 256),))
    assert wide([(("t", "m"), 0)], {"t": 2**30 - 1, "m": 2}, tile)
    assert not wide([(("t", "m"), 0)], {"t": 2**29, "m": 2}, tile)
