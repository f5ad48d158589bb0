"""The counts that brought the kernels at the model band's edges in (benchmarks/model_check.py
--kernels, static SASS over the model's issue slots, h100): each against a hand count, on
hand-made SASS and CUDA where the estimate reads them, on the library's plans where the model
counts them (no compiler: the SASS-compiling checks are test_simt_sass's)."""

from __future__ import annotations

import math

import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.runtime.mainloop import Instruction, loops

from .test_simt_sass import _module


def _sass(lines: list[str]) -> list[Instruction]:
    """Hand-made SASS: one instruction a line, 16 bytes apart from 0: `OP`, `@P0 OP`, `BRA
    0x..` (a branch's target)."""
    out = []
    for k, line in enumerate(lines):
        parts = line.split()
        pred = parts.pop(0) if parts[0].startswith("@") else ""
        target = int(parts[1], 16) if parts[0] == "BRA" else None
        out.append(Instruction(16 * k, parts[0], pred, target))
    return out


# a blocks' loop unswitched on a size test (embedding's): 3 entry instructions and the branch
# to the second copy, the first copy's 2 before its loop (0x60-0xa0, an inner rolled loop at
# 0x80-0x90: the one-value fallback), EXIT; the second copy's 2 before its loop (0xe0-0x130,
# no inner loop: the 16-byte run), EXIT, the final BRA to itself
UNSWITCHED = ["S2R", "LOP3", "ISETP", "@!P0 BRA 0xc0", "I2F", "MUFU",
              "IMAD", "ISETP", "IMAD", "@P2 BRA 0x80", "@!P3 BRA 0x60", "EXIT",
              "I2F", "MUFU", "F2I", "IMAD", "LDG.E.CONSTANT", "LDG.E.128.CONSTANT",
              "STG.E.128", "@!P3 BRA 0xe0", "EXIT", "BRA 0x150"]


def test_the_blocks_loop_the_sizes_take_and_what_a_block_runs_before_it():
    """sass_simt.blocks_loop: of the two copies of the blocks' loop, the one holding as many
    loops as the CUDA's element loops the sizes take (none: the fallback's rolled loop is in
    the branch they do not take, trip 0); entry_path: the 4 entry instructions, then the
    branch over the first copy taken, the second copy's 2 before its loop: 6. Before, the
    longest loop (the fallback's) was the blocks' loop and nothing before it counted:
    embedding read 60 a warp and block where its blocks run 94 (static, h100)."""
    simt = _module("sass_simt")
    insns = _sass(UNSWITCHED)
    found = loops(insns)
    untaken = [{"trip": 0, "accesses": 2, "bytes": 4}]
    outer, taken = simt.blocks_loop(found, untaken)
    assert (outer.start, outer.end) == (0xe0, 0x130) and taken == []
    assert simt.entry_path(insns, found, outer) == 4 + 2
    # (where the sizes take every element loop: the longest loop, every element loop kept;
    # the path to the first copy falls through the branch: its 2 before its loop)
    outer, taken = simt.blocks_loop(found, [{"trip": 8, "accesses": 2, "bytes": 4}])
    assert (outer.start, outer.end) == (0xe0, 0x130) and len(taken) == 1
    first = next(lp for lp in found if lp.start == 0x60)
    assert simt.entry_path(insns, found, first) == 4 + 2


COPIES = """
    if (n % 8 == 0) {
      for (int eo = 0; eo < (4); ++eo) {
        const uint4* const cps = reinterpret_cast<const uint4*>(p0 + eo);
        uint4* const cpd = reinterpret_cast<uint4*>(sm1 + eo * 256);
        for (int e = tid; e < n / 8; e += 32) {
          cpd[e] = cps[e];
        }
      }
    } else {
      for (int eo = 0; eo < (4); ++eo) {
        const __half* const cps = reinterpret_cast<const __half*>(p0 + eo);
        __half* const cpd = reinterpret_cast<__half*>(sm1 + eo * 256);
        for (int e = tid; e < n; e += 32) {
          cpd[e] = cps[e];
        }
      }
    }
"""


def test_a_size_tested_copy_pairs_with_its_own_version_of_the_sass():
    """sass_align: the 16-byte version of a copy (`uint4` pointers declared in its row loop)
    is wide, the one-value version (`__half`) not, though both name `cps` and `cpd`; laid out
    in the SASS the other way round (nvcc puts the version the sizes do not take first), each
    C loop pairs with the SASS loop of its own width, the untaken one (trip 0) out of order.
    Before, in order, the taken rows counted the fallback's loop (89 instructions a row in
    cross_entropy at 4096, 23 its own: static SASS/model 1.24 -> 1.13)."""
    align = _module("sass_align")
    sizes = {"n": 4096}
    cs = align.c_tree(COPIES, sizes, None, 1)
    assert [(c["trip"], c["wide"]) for c in cs] == [(4, True), (0, False)]
    assert [(c["trip"], c["wide"]) for c in cs[0]["children"]] == [(16, True)]

    def s(wide, children=()):
        return {"loop": None, "kinds": frozenset({"LDG", "STS"}), "wide": wide,
                "chunk": False, "fill": False, "memory": 2, "children": list(children)}
    narrow, wide = s(False, [s(False)]), s(True, [s(True)])
    pairs = align._align(cs, [narrow, wide])
    assert (cs[0], wide) in pairs and (cs[1], narrow) in pairs
    assert (cs[0]["children"][0], wide["children"][0]) in pairs


def test_each_lane_loop_reads_the_staged_row_again():
    """loop_reads.readers and issue_simt.loop_reads against the emitted loops (codegen/
    scalar.py): cross_entropy's logits Z are read by the logsumexp's two loops and the
    label's sum (3; its label is no row), softmax's X by its statistics' two loops and its
    output's (3), layernorm's X by the mean, the variance's squares and the output (3) and
    its gain and bias by the output only; per block (one row of 1024 at the default sizes)
    3 x 1024 values, READ_NARROW each. H counted Z once: cross_entropy read 1.24 (static)."""
    from napkin.compiler import issue_simt, loop_reads
    found = {}
    for name in ("cross_entropy", "softmax", "layernorm"):
        p = plan(napkin.load(name), "h100", {})
        (kp,) = p.kernels
        assert kp.choice.stream is None
        means = {w.axes for w in kp.model.work if w.op == "mean"}
        work = {w.node: w for w in kp.model.work}
        found[name] = sorted(sum(issue_simt._loops(kp.model, work[r], means) for r in rd) + st
                             for _, rd, st in loop_reads.readers(p.graph, kp.kernel,
                                                                 kp.model.reduced))
        assert kp.model.loop_reads == loop_reads.readers(p.graph, kp.kernel, kp.model.reduced)
    assert found == {"cross_entropy": [3], "softmax": [3], "layernorm": [1, 1, 3]}
    p = plan(napkin.load("cross_entropy"), "h100", {})
    (kp,) = p.kernels
    (z,) = [a for a in kp.model.arrays if a.role == "load" and "v" in a.axes]
    rows = p.sizes["t"]
    moved, values, lanes = issue_simt.loop_reads(kp.model, kp.choice,
                                                 [(z, 2.0 * rows * 1024)])
    assert (moved, values) == (2.0 * rows * 1024, rows * 3 * 1024)
    assert lanes == values * issue_simt.READ_NARROW


def test_a_row_of_one_round_is_no_loop():
    """copies.costs: a contiguous row of a constant length whose vectors the threads cover in
    one round is an `if` (codegen/staging._each), COPY_ROW_ONCE and its copy: rope's rows of
    16 vectors for 32 threads, 16 + 8 = 24 (its SASS: 24 a row, static); of a runtime length
    (a loop: its setup and peeled remainder) or of more rounds, COPY_ROW and each round."""
    from napkin.compiler import copies
    assert copies.costs(16, 128, 8, 32, static=True)[0] == 16 * (16 + 8)
    assert copies.costs(16, 128, 8, 32)[0] == 16 * (40 + 8)
    assert copies.costs(1, 4096, 8, 64, static=True)[0] == 40 + 8 * 8
    # issue_simt._copy: cross_entropy at t = v = 4096 copies 4 rows of a 256-value chunk a
    # chunk, 32 vectors for 32 threads (a constant chunk along the array's last axis)
    from napkin.compiler import issue_simt
    p = plan(napkin.load("cross_entropy"), "h100", {"t": 4096, "v": 4096})
    (kp,) = p.kernels
    assert kp.choice.stream == ("v", 256) and dict(kp.choice.group)["t"] == 4
    (z,) = [a for a in kp.model.arrays if a.role == "load" and "v" in a.axes]
    assert issue_simt._copy(z, kp.choice, p.sizes, {"t": 4, "v": 4096}, 32,
                            kp.model.fixed) == 4 * (16 + 8)


def test_a_staged_reduction_run_is_its_test_and_branch():
    """issue.staged on rmsnorm_linear (64 x 128 blocks of 64 threads, chunks of 16 along i):
    per chunk and warp two runs of its operand X * g (8 values from X's and g's 16-byte loads,
    packed and stored: 20 + 2 x (3 + 8) + 4 = 46 each) and two of its mean's X * X (its
    test and branch and one load: 6 + 3 + 8 = 17 each; its SASS issues 33 and 28 with the
    FFMA and the count's FADD, the ops'): 126. As an operand's, 20 a run, it was 154."""
    from napkin.compiler import issue
    p = plan(napkin.load("rmsnorm_linear"), "h100", {})
    (kp,) = p.kernels
    assert dict(kp.choice.group) == {"o": 128, "t": 64} and kp.schedule.threads == 64
    level1 = {"t": 64, "o": 128, "i": p.sizes["i"]}
    assert issue.staged(kp.model, kp.choice, level1, 64) == 2 * 46 + 2 * 17


def test_a_stored_element_is_indexed_in_64_bits_once():
    """issue_simt.warp_instructions: in a kernel indexing in 64 bits, INDEX_WIDE per value read
    or stored, a stored element once (H's bytes of the store were counted as values read
    besides: rope at 4096 read 0.82 static SASS/model with it, 0.94 without). `Y = X * 2`:
    per element X read, Y stored, 2 values."""
    import numpy as np
    from napkin.compiler import issue_simt
    p = plan(napkin.load("axis t, o\nin X[t o]: f16\nY[t o] = X * 2\nout Y: f16\n"), "h100",
             {"t": 4096, "o": 4096})
    (kp,) = p.kernels
    (x,) = [a for a in kp.model.arrays if a.role == "load"]
    n = 4096 * 4096
    H = [0.0, 2.0 * n * 2]            # (the register level's bytes: X read, Y stored)
    from napkin.compiler.choices import Choices
    args = (kp.model, Choices.of(kp.choice), p.sizes, dict(kp.choice.group) | {"t": 1, "o": 1}, 32, 1,
            1.0, H, [n / 32])
    narrow = issue_simt.warp_instructions(*args, wide=False, reads=[(x, 2.0 * n)])[0]
    wide = issue_simt.warp_instructions(*args, wide=True, reads=[(x, 2.0 * n)])[0]
    assert float(np.asarray(wide - narrow)) == pytest.approx(issue_simt.INDEX_WIDE * 2 * n)
    assert math.isfinite(float(np.asarray(wide)))


def test_a_copied_row_value_by_value_shares_its_stores_index(monkeypatch):
    """Embedding at m = 769 (no multiple of a 16-byte run: each value gathered and stored by
    itself): per value its STORE (1024 x 769 of them) and its reads, no UNSTAGED of its own:
    its position and clamp are its store's (static SASS/model 0.78 with it, 1.02 without,
    h100). The row's position tok[t] is read from global memory once a thread (8 values),
    UNSTAGED: a load only gathers read is not staged (schedule._staged; the model copied it,
    COPY_ROW a block, until 2026-12-07)."""
    from napkin.compiler import issue_simt
    from napkin.compiler.cost import evaluate
    p = plan(napkin.load("embedding"), "h100", {"t": 1024, "v": 1024, "m": 769})
    (kp,) = p.kernels
    assert not kp.schedule.runs

    def issue(**constants):
        for name, value in constants.items():
            monkeypatch.setattr(issue_simt, name, value)
        cost = evaluate(kp.model, kp.columns, kp.choice, p.sizes, p.target)
        return dict(cost.compute_parts)["issue"] * p.target.per_second("schedulers") * 32
    base, unstaged = issue(), issue_simt.UNSTAGED
    assert issue(UNSTAGED=unstaged + 90) - base == pytest.approx(90 * 1024 * 769 / 8)
    base = issue(UNSTAGED=unstaged)
    assert issue(STORE=issue_simt.STORE + 1) - base == pytest.approx(1024 * 769)
