"""The suite catches seeded code generation bugs: a dropped barrier, a dropped tail mask,
a stride shifted by one."""

from __future__ import annotations

import re

import pytest

from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import compare, emulate, reference
from napkin.runtime.emulated import signatures
from napkin.runtime.launches import buffer_names, make_buffers, make_launches

from .conftest import library, shape_of


def run(d, shape, edit=None, sanitize="none"):
    inputs = random_inputs(d, shape, 1)
    p = plan(d, "h100", shape)
    prog = lower(p)
    source = render(prog)
    if edit is not None:
        edited = edit(source)
        assert edited != source, "the seeded bug did not change the source"
        source = edited
    buffers = make_buffers(prog, inputs, p.sizes, set(p.graph.graph["inputs"]))
    launches = [emulate.Launch(s.kernel, (min(s.grid, 8), 1, 1), (s.block, 1, 1), s.smem_bytes, s.args)
                for s in make_launches(prog, p.sizes)]
    out = emulate.run(source, signatures(prog), launches, buffers, sanitize=sanitize, timeout_s=240)
    names = buffer_names(prog)
    result = {s.name: out[names[s.name]] for s in d.outputs}
    ref = reference.evaluate(d, inputs)
    low = reference.evaluate(d, inputs, precision="lowp")
    return [compare.check(result[s.name], ref[s.name], low[s.name], s.dtype) for s in d.outputs]


def attention():
    d = library("attention", "f16")
    return d, shape_of(d, b=1, h=2, q=19, x=45)


def test_unmodified_kernel_passes_every_check():
    d, shape = attention()
    assert all(run(d, shape, sanitize="thread"))
    assert all(run(d, shape, sanitize="address"))


def test_dropped_barrier_is_a_race():
    d, shape = attention()

    def drop(source):   # the barrier between staging a chunk of K and V and reading it
        at = source.index("__global__")           # the kernel, past the prelude's helpers
        parts = source[at:].split("__syncthreads();")
        assert len(parts) == 5   # around the queries' tile, then around each chunk
        return source[:at] + "__syncthreads();".join(parts[:4]) + "/* barrier dropped */" + \
            parts[4]
    with pytest.raises(NapkinError) as exc:
        run(d, shape, drop, sanitize="thread")
    assert "race" in str(exc.value).lower()


def test_dropped_tail_mask_reads_out_of_bounds():
    d, shape = attention()

    def drop(source):   # stage chunks without checking that the key exists
        return re.sub(r"sm(\d+)\[e\] = \((.*?)\) \? (p\d+\[.*?\]) : napkin_from_float<__half>\(0\.0f\);",
                      r"sm\1[e] = \3;", source)
    with pytest.raises(NapkinError) as exc:
        run(d, shape, drop, sanitize="address")
    assert "AddressSanitizer" in str(exc.value) or "overflow" in str(exc.value)


def test_stride_shifted_by_one_gives_wrong_values():
    d = library("matmul", "f32")
    shape = shape_of(d)

    def shift(source):   # the output's row stride
        return source.replace(") * (n2) + (", ") * (n2 + 1) + (", 1)
    verdicts = run(d, shape, shift)
    assert not all(verdicts)


def test_missing_rescale_in_online_softmax_gives_wrong_values():
    d, shape = attention()

    def drop(source):
        return re.sub(r"(st\d+\[k\d+\]) = \1 \* (v\d+) \+", r"\1 = \1 +", source)
    assert not all(run(d, shape, drop))
