"""Packed GQA rows (compiler/packing.py) under a causal mask, and packed rows where the row axis
is already a fragment long (prefill with GQA).

The emitted CUDA runs on the CPU emulator against the float64 reference (the tolerance rule
of test_emulated_library.py): causal speculative decoding `x <= q + size(x) - size(q)` at
r x q = 16 and 15 rows, keys at odd sizes, split and not; causal prefill `x <= q` with blocks
of rows inside one cycle of q and blocks wrapping around it; prefill-like GQA r = 4, q = 33
and r = 16, q = 3 packed. Seeded bugs: the mask reading the packed row index instead of its
q, and the chunk skip bounding q by the block's first row only, must fail. The model's share
of computed chunks is checked against a brute-force count over the rows' own (r, q).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler import packing
from napkin.compiler.cost import Choice
from napkin.compiler.flash import FlashSite
from napkin.compiler.fractions import computed_fraction
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.pipeline import run_plan
from napkin.runtime import compare, reference

from .conftest import emulate_buffers, library

THOROUGH = pytest.mark.thorough


def _diagram(mask: str | None, dtype: str = "bf16", d: int = 32):
    score = "Q * K / sqrt(size(d))"
    s = f"where({mask}, {score}, -inf)" if mask else score
    return napkin.load(f"axis b, g, r, q, x\naxis d = {d}\n"
                       f"in Q[b g r q d]: {dtype}\nin K[b g x d]: {dtype}\n"
                       f"in V[b g x d]: {dtype}\nS[b g r q x] = {s}\n"
                       "P[b g r q x] = softmax[x](S)\nO[b g r q d] = P * V\n"
                       f"out O: {dtype}")


DECODE = "x <= q + size(x) - size(q)"      # speculative decoding: the last q keys causal
PREFILL = "x <= q"


def _site(p):
    return next(kp.schedule.site for kp in p.kernels if isinstance(kp.schedule.site, FlashSite))


def _verdict(p, d, inputs, dtype, out=None):
    got = out(p, inputs) if out else run_plan(p, inputs, p.sizes)["O"]
    ref = reference.evaluate(d, inputs)["O"]
    low = reference.evaluate(d, inputs, precision="lowp")["O"]
    return compare.check(got, ref, low, dtype, "O")


def _packed(p):
    """The plan with its attention's rows packed (with_choices: the choice names `(r q)`),
    blocks of 16 rows, 32-key chunks."""
    site = _site(p)
    if site.packed:
        return p
    ones = (("b", 1), ("g", 1))
    rows = packing.name(("r", "q"))
    choice = Choice(group=((rows, 16),) + ones, stream=(site.red, 32),
                    thread=((rows, 16),) + ones, warps=((rows, 1),))
    return with_choices(p, [choice])


CASES = [  # mask, r, q, x, dtype, splits of x (None: unsplit)
    (DECODE, 4, 4, 37, "bf16", None),       # 16 rows: every block spans all of q
    (DECODE, 3, 5, 41, "f16", 4),           # 15 rows, split: the partials' masks
    (PREFILL, 4, 33, 45, "f16", None),      # blocks inside one cycle of q and across two
    (None, 16, 3, 37, "bf16", None),        # prefill-like: r a fragment long, packed
    pytest.param(DECODE, 4, 4, 129, "f16", 4, marks=THOROUGH),
    pytest.param(DECODE, 3, 5, 64, "bf16", None, marks=THOROUGH),
    pytest.param(DECODE, 8, 3, 131, "bf16", 3, marks=THOROUGH),
    pytest.param(None, 4, 33, 65, "f16", None, marks=THOROUGH),
    pytest.param(PREFILL, 2, 40, 40, "bf16", None, marks=THOROUGH),
]


@pytest.mark.parametrize("mask, r, q, x, dtype, split", CASES)
def test_packed_rows_under_a_mask_emulated(mask, r, q, x, dtype, split):
    d = _diagram(mask, dtype)
    over = {"split": {"x": split}} if split else None
    shape = {"b": 2, "g": 2, "r": r, "q": q, "x": x}
    p = plan(d, "h100", shape, engine="tensor-cores", overrides=over)
    p = p if split else _packed(p)
    assert _site(p).packed == ("r", "q")
    assert (p.split is not None) == bool(split)
    verdict = _verdict(p, d, random_inputs(d, shape, 5), dtype)
    assert verdict.ok, verdict.message


def test_paged_attention_with_a_fragment_of_queries_packed_emulated():
    """paged_attention (K and V rows through the page table, `x < len[b]` read from data) at
    q = 17 with its rows packed, as the planner now packs the library's small shape."""
    P, x, b, g, r, q, dtype = 8, 45, 3, 2, 2, 17, "f16"
    j = -(-x // P)
    n = b * j + 3
    d = library("paged_attention", dtype, x=x, j=j, P=P)
    shape = dict(b=b, g=g, r=r, q=q, n=n)
    p = _packed(plan(d, "h100", shape, engine="tensor-cores"))
    assert _site(p).packed == ("r", "q")
    rng = np.random.default_rng(3)
    inputs = {"Q": rng.standard_normal((b, g, r, q, 64)).astype(np.float16),
              "Kc": rng.standard_normal((n, P, g, 64)).astype(np.float16),
              "Vc": rng.standard_normal((n, P, g, 64)).astype(np.float16),
              "pages": rng.permutation(n)[:b * j].reshape(b, j).astype(np.int32),
              "len": np.array([x - 5, 0, P + 1], dtype=np.int32)}
    verdict = _verdict(p, d, inputs, dtype)
    assert verdict.ok, verdict.message


def test_the_schedule_interpreter_runs_packed_rows_under_a_mask():
    from napkin.runtime.interpret import interpret
    d = _diagram(DECODE, "f16")
    shape = {"b": 1, "g": 2, "r": 3, "q": 5, "x": 45}
    p = plan(d, "h100", shape, engine="tensor-cores", overrides={"split": {"x": 3}})
    assert _site(p).packed == ("r", "q")
    verdict = _verdict(p, d, random_inputs(d, shape, 2), "f16",
                       out=lambda p, inputs: interpret(p, inputs)["O"])
    assert verdict.ok, verdict.message


def _seeded(d, shape, pattern, replacement):
    def out(p, inputs):
        edit = lambda src: re.sub(pattern, replacement, src)
        return emulate_buffers(p, inputs, shape, edit=edit)["O"]
    p = _packed(plan(d, "h100", shape, engine="tensor-cores"))
    return p, _verdict(p, d, random_inputs(d, shape, 7), "f16", out=out)


def test_a_seeded_bug_the_mask_reading_the_packed_row_fails():
    """The per-score mask compares x with the packed row index i instead of its q = i %
    size(q) (the lane's table of its rows, `pr0`, read where its table of q is: codegen/mma.py
    _lane_rows): rows past the first r see keys they must not; the emulated output is wrong."""
    d = _diagram(DECODE, "f16")
    p, verdict = _seeded(d, {"b": 1, "g": 2, "r": 4, "q": 3, "x": 37},
                         r"\(\(long long\)\(pr\d+(\[i0\]\[i2 / 2\])\)\)",
                         r"((long long)(pr0\1))")
    assert _site(p).packed == ("r", "q")
    assert not verdict.ok


def test_a_seeded_bug_in_the_chunk_skip_bound_fails():
    """A block wrapping around q must bound it by all of q: bounded by 0 there instead, the
    skip hides the chunk [32, 33) that only q = 2 sees (x <= q + 30); the output is wrong."""
    d = _diagram(DECODE, "f16")
    p, verdict = _seeded(d, {"b": 1, "g": 2, "r": 4, "q": 3, "x": 33},
                         r": \(\(int\)\(n\d+\) - 1\)\);", r": 0);")
    assert _site(p).packed == ("r", "q")
    assert not verdict.ok


def _brute_fraction(nr, nq, nx, rows, chunk, offset):
    """The share of (block, chunk) pairs where some row (r, q) of the block sees some key
    of the chunk (x <= q + offset), each row decomposed one by one."""
    n = nr * nq
    seen = []
    for r0 in range(0, n, rows):
        qs = np.arange(r0, min(r0 + rows, n)) % nq
        for c0 in range(0, nx, chunk):
            seen.append(c0 <= qs.max() + offset)
    return float(np.mean(seen))


@pytest.mark.parametrize("nr, nq, nx, rows, chunk, offset", [
    (4, 4, 4096, 16, 16, 4092), (3, 5, 41, 16, 16, 36), (4, 33, 45, 16, 16, 0),
    (4, 64, 64, 32, 16, 0), (2, 40, 40, 64, 32, 0), (4, 2048, 2048, 128, 64, 0)])
def test_the_models_share_of_computed_chunks_follows_the_rows_own_q(nr, nq, nx, rows, chunk,
                                                                      offset):
    mask = ("le", ("index", "x"), ("add", ("index", "q"), ("const", float(offset))))
    packed = (("(r q)", ("r", "q")),)
    sizes = {"r": nr, "q": nq, "x": nx}
    got = computed_fraction(mask, sizes, {"(r q)": rows, "x": chunk}, packed=packed)
    assert got == pytest.approx(_brute_fraction(nr, nq, nx, rows, chunk, offset))


def _model(mask, shape):
    p = plan(_diagram(mask, "f16", d=128), "h100", shape)
    return p, sum(float(kp.cost.time) for kp in p.kernels)


def test_the_planner_packs_causal_speculative_decoding():
    """b=8 g=8 r=4 q=4 x=4096 d=128 on h100 (model): with q's causal mask the rows pack and
    the keys split, as without a mask (80.7 us unpacked before, 48.2 us now)."""
    p, causal = _model(DECODE, {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096})
    _, plain = _model(None, {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096})
    assert _site(p).packed == ("r", "q") and p.split is not None
    assert causal < 1.02 * plain and causal < 60e-6, (causal, plain)


def test_the_planner_packs_prefill_where_the_model_says_it_is_faster():
    """r=4 q=33 (blocks of 64 rows: unpacked, half of each block is padding and K, V are read
    once per r) packs; r=4 q=2048 (blocks of 128 rows read K and V as often either way) ties
    and keeps one axis of rows."""
    p, packed = _model(None, {"b": 2, "g": 8, "r": 4, "q": 33, "x": 4096})
    assert _site(p).packed == ("r", "q")
    p, _ = _model(PREFILL, {"b": 2, "g": 8, "r": 4, "q": 2048, "x": 2048})
    assert _site(p).packed == () and _site(p).row == "q"


def test_explain_says_the_causal_rows_are_packed():
    from napkin.explain import render_text, report
    p = plan(_diagram(DECODE, "f16", d=128), "h100", {"b": 8, "g": 8, "r": 4, "q": 4,
                                                       "x": 4096})
    text = render_text(report(p))
    assert "rows packed: r x q = 4 x 4 = 16, in blocks of 16" in text


# -- the rows' decomposition stays out of the key loop ----------------------------------------

def _cuda(d, shape):
    from napkin import pipeline
    p = plan(d, "h100", shape)
    made = pipeline.through(p, "plan", "program", pipeline.Options.make(target="h100"))
    from napkin.codegen.render import render
    return p, made["program"], render(made["program"])


def _key_loop(cuda: str) -> str:
    """The first kernel's loop over whole chunks (`for (... c0 = ...; c0 < cfull; ...)`)."""
    kernel = cuda[cuda.index("__global__"):]
    at = kernel.index("{", re.search(r"for \([^;]* c0 = [^;]*; c0 < cfull;", kernel).end())
    depth = 0
    for i, ch in enumerate(kernel[at:], at):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return kernel[at:i + 1]
    raise AssertionError("unbalanced")


@pytest.mark.parametrize("q, static", [(4, False), (4, True), (3, True)])
def test_the_key_loop_divides_by_no_size_of_the_packed_rows(q, static):
    """Each lane's packed rows are decomposed into (r, q) once per block, before the chunks
    (codegen/mma.py _lane_rows): the chunk loop of causal speculative decoding reads q from the
    lane's table and holds no `/` or `%` by size(q), a runtime size (n3) or a constant (q
    declared `axis q = 4`). Static SASS (sm_90, b=8 g=8 r=4 q=4 x=4096 d=128): the loop was 479
    instructions for 32 HMMA with the division per score, 441 without (unmasked 411).
    Without a mask reading q the tables are declared after the loop (nothing in it reads them;
    the epilogue's stores do: codegen/packed._place_lane_rows)."""
    d = _diagram(DECODE, "f16", d=128)
    shape = {"b": 8, "g": 8, "r": 4, "q": q, "x": 4096}
    if static:
        d = napkin.load(d.source.text.replace("axis b, g, r, q, x", f"axis b, g, r, x\naxis q = {q}"))
        del shape["q"]
    p, program, cuda = _cuda(d, shape)
    assert _site(p).packed == ("r", "q")
    size = str(q) if static else dict((a, n) for n, a in program.size_params)["q"]
    by_q = re.compile(rf"[/%] \((?:int|long long)\)\({size}\)")
    loop = _key_loop(cuda)
    assert not by_q.search(loop), by_q.search(loop)
    assert re.search(r"\(\(long long\)\(pr\d+\[i0\]\[i2 / 2\]\)\)", loop)   # q, from the table
    assert by_q.search(cuda[cuda.index("__global__"):])       # (decomposed before the loop)
    _, _, plain = _cuda(_diagram(None, "f16", d=128), {"b": 8, "g": 8, "r": 4, "q": 4, "x": 4096})
    plain_loop = _key_loop(plain)
    assert not re.search(r"\bpr\d+\[", plain_loop)
    assert re.search(r"\bpr\d+\[", plain).start() > plain.index(plain_loop) + len(plain_loop)


def test_a_packed_row_of_a_static_size_of_q_emulated():
    """q declared `axis q = 3` (its size a constant in the C: the tables divide by it) under
    causal speculative decoding, packed rows r x q = 15: the emulated output against the
    float64 oracle."""
    text = _diagram(DECODE, "bf16").source.text.replace("axis b, g, r, q, x",
                                                         "axis b, g, r, x\naxis q = 3")
    d = napkin.load(text)
    shape = {"b": 2, "g": 2, "r": 5, "x": 41}
    p = _packed(plan(d, "h100", shape, engine="tensor-cores"))
    assert _site(p).packed == ("r", "q")
    verdict = _verdict(p, d, random_inputs(d, shape, 4), "bf16")
    assert verdict.ok, verdict.message


@THOROUGH
def test_the_packed_causal_loop_has_no_division_in_its_sass():
    """Static SASS (sm_90) of the packed causal decode's main loop (b=8 g=8 r=4 q=4 x=4096
    d=128, h100): no MUFU.RCP (an integer division by a runtime size: I2F.RP, MUFU.RCP, F2I),
    and within 40 instructions of the unmasked packed loop (the mask's own compares: 441
    against 411; 479 while each score divided)."""
    from ..compiler.test_simt_sass import _need_disassembler
    from napkin import pipeline
    from napkin.runtime import mainloop, sass
    _need_disassembler()
    loops = []
    for mask in (DECODE, None):
        p = plan(_diagram(mask, "f16", d=128), "h100", {"b": 8, "g": 8, "r": 4, "q": 4,
                                                         "x": 4096})
        assert _site(p).packed == ("r", "q")
        made = pipeline.through(p, "plan", "binary",
                                pipeline.Options.make(target="h100", arch="sm_90"))
        loop = mainloop.main_loop(sass.disassemble(made["binary"].cubin),
                                  made["program"].kernels[0].name)
        loops.append(loop)
    causal, plain = loops
    assert not [i.opcode for i in causal.instructions if i.opcode.startswith("MUFU.RCP")]
    assert causal.hmma_16816 == plain.hmma_16816 == 32
    assert len(causal.instructions) <= len(plain.instructions) + 40, \
        (len(causal.instructions), len(plain.instructions))
