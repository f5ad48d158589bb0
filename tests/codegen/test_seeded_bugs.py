"""The suite catches seeded code generation bugs: a dropped barrier, a dropped tail mask,
a stride shifted by one."""

from __future__ import annotations

import re

import pytest

from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError
from napkin.runtime import compare

from .conftest import emulate_buffers, library, shape_of


def run(d, shape, edit=None, sanitize="none"):
    inputs = random_inputs(d, shape, 1)
    # (the bugs are seeded in its code: the keys streamed in chunks of 16, staged and
    # rescaled, which the model and an unstreamed kernel predict alike at these sizes)
    hints = {"stream": {"x": 16}} if "x" in d.axes else None
    p = plan(d, "h100", shape, hints, engine="cuda-cores")
    out = emulate_buffers(p, inputs, p.sizes, edit=edit, grid=8, sanitize=sanitize)
    result = {s.name: out[s.name] for s in d.outputs}
    ref, low, order = compare.references(d, inputs, p)
    return [compare.check(result[s.name], ref[s.name], low[s.name], s.dtype, s.name, order[s.name])
            for s in d.outputs]


def attention():
    d = library("attention", "f16")
    return d, shape_of(d, b=1, h=2, q=19, x=45)


@pytest.mark.thorough     # (10 CPU-s; each seeded bug's own test runs the same checks)
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


@pytest.mark.thorough   # (5 CPU-s: an attention kernel under AddressSanitizer; an unguarded tail
def test_dropped_tail_mask_reads_out_of_bounds():   # read is caught by default in test_emulate_detectors)
    d, shape = attention()

    def drop(source):   # stage chunks without checking that the key exists: a copy walking
        # rows (its valid length `nlen`) or one over the tile's flat index (compiler/copies.py
        # picks by the model; at 19 x 45 in blocks of 256 the chunks of 8 keys go flat)
        source = re.sub(r"cpd\[e\] = \(e < nlen\) \? (cps\[[^\]]*\]) : [^;]*;", r"cpd[e] = \1;",
                        source)
        return re.sub(r"sm(\d+)\[e\] = \((.*?)\) \? (p\d+\[.*?\]) : napkin_from_float<__half>"
                      r"\(0\.0f\);", r"sm\1[e] = \3;", source)
    with pytest.raises(NapkinError) as exc:
        run(d, shape, drop, sanitize="address")
    assert "AddressSanitizer" in str(exc.value) or "overflow" in str(exc.value)


def test_stride_shifted_by_one_gives_wrong_values():
    d = library("matmul", "f32")
    shape = shape_of(d)

    def shift(source):   # the output's row stride
        return source.replace(") * (((int)(n2))) + (", ") * (((int)(n2)) + 1) + (", 1)
    verdicts = run(d, shape, shift)
    assert not all(verdicts)


def test_missing_rescale_in_online_softmax_gives_wrong_values():
    d, shape = attention()

    def drop(source):
        # (the register array indexed by a loop's counter, or by a constant where the lowering
        # unrolls the lanes' trips: codegen/held.py)
        return re.sub(r"(st\d+\[(?:k\d+|\d+)\]) = \1 \* (v\d+) \+", r"\1 = \1 +", source)
    assert not all(run(d, shape, drop))


# -- the swizzled shared tiles (compiler/tilelayout.py): a read that disagrees with the store --

SWIZZLE_BUGS = {
    # the ldmatrix tables read the tile as if unswizzled; the copies still swizzle
    "swizzled on the store, not on the ldmatrix read": lambda s: re.sub(
        r" \^ \(\(\(lane % 8\) << \d\) & \d+\)", "", s),
    # the reads XOR with the next row's term
    "the read's XOR term of the wrong row": lambda s: s.replace("(((lane % 8) <<",
                                                                "((((lane + 1) % 8) <<"),
    # rows of 2 chunks read with the term of 8-chunk rows (its shift dropped)
    "the read's XOR term without its shift": lambda s: s.replace("(((lane % 8) << 1) & 8)",
                                                                 "(((lane % 8) << 3) & 8)"),
}


@pytest.mark.parametrize("bug", list(SWIZZLE_BUGS))
def test_seeded_swizzle_bugs_give_wrong_values(bug):
    from .test_tensor_cores import retiled, tc_plan, verdicts
    d = library("matmul", "f16")
    p = retiled(tc_plan(d), 16, {"m": (64, 2), "n": (64, 2)})     # A's rows: 2 chunks
    for shape in ({"m": 70, "k": 83, "n": 50}, {"m": 64, "k": 64, "n": 64}):
        assert all(verdicts(d, p, shape))
        assert not all(verdicts(d, p, shape, source_edit=SWIZZLE_BUGS[bug]))


@pytest.mark.parametrize("bug", list(SWIZZLE_BUGS)[:2])
def test_seeded_swizzle_bugs_in_attention_give_wrong_values(bug):
    from .test_tensor_cores import flash_plan, verdicts, with_static
    d = library("attention", "f16")
    shape = with_static(d, {"b": 1, "h": 2, "q": 37, "x": 70})
    p = flash_plan(d)
    assert all(verdicts(d, p, shape))
    assert not all(verdicts(d, p, shape, source_edit=SWIZZLE_BUGS[bug]))
