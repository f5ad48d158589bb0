"""The epilogue of a tensor-core product's row statistics over its columns (an LM head's
cross-entropy, compiler/column_epilogue.py): priced once, the same by the planner and by
explain (the work after the product's loop: the statistics' per-element issue slots and the
merges of the rows' states), its warp-merge buffers in the block's shared memory, and the
label read once per lane and row in the emitted kernel."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler import epilogue_stats
from napkin.compiler.buffers import buffers
from napkin.compiler.cost import evaluate
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import Source

HEAD = "axis t, m, v\nin H[t m]: f16\nin W[v m]: f16\nin label[t]: i32\n"
CE = HEAD + "Z[t v] = H * W\nL[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\nout L: f32\n"
BIG = {"t": 4096, "m": 4096, "v": 50257}


def _ce():
    return napkin.load(Source("<ce>", CE))


def _fused(p):
    (kp,) = [kp for kp in p.kernels if kp.model.columns]
    return kp


@pytest.fixture(scope="module")
def same_tiling():
    """explain's fused figure of the unsplit plan, and the planner's plan split as that figure
    assumes (its parts, its chunk of m): the same tiles of (t, v) either way."""
    unsplit = plan(_ce(), "h100", BIG, overrides={"split": {"v": 1}})
    rep = epilogue_stats.for_plan(unsplit)
    (k0,) = [kp for kp in unsplit.kernels if kp.model.streaming.axis == "m"]
    p = plan(_ce(), "h100", BIG, overrides={"split": {"v": rep["parts"]},
                                            "stream": {"m": k0.choice.stream[1]}})
    return rep, p


def test_the_planner_and_explain_price_the_epilogue_after_the_loop_alike(same_tiling):
    """At explain's tiling the planner's fused kernel costs what explain says (before, the
    planner left out the ~0.1 ms after the product's loop that explain counted), and that
    part is at least the merges' shuffles and one instruction per statistic and element."""
    rep, p = same_tiling
    kp = _fused(p)
    group = dict(kp.choice.group)
    assert [group["t"], group["s_v"]] == rep["tile"]
    assert float(kp.cost.time) == pytest.approx(rep["fused_seconds"], rel=0.005)
    without = evaluate(replace(kp.model, columns=()), kp.columns, kp.choice, p.sizes, p.target)
    after = float(kp.cost.time) - float(without.time)
    # a lower bound counted here: per warp, for each row a lane holds (2 a 16-row fragment)
    # and each state slot (3: the logsumexp's max and sum, the label's logit), 2 shuffles;
    # per element of the tile, one instruction per statistic (2); over every block
    warps = dict(kp.choice.warps)
    blocks = (BIG["t"] // group["t"]) * rep["parts"]
    rows = dict(kp.choice.thread)["t"] // 8
    merges = blocks * warps["t"] * warps["s_v"] * rows * 3 * 2
    elements = BIG["t"] * rep["parts"] * group["s_v"] * 2 / 32
    rate = p.target.per_second("schedulers")
    assert after >= (merges + elements) / rate / kp.cost.blocks_per_sm > 0


def test_the_warp_merge_buffers_are_in_the_blocks_shared_memory(same_tiling):
    """Warps side by side along v merge the rows' states through shared memory: the model's
    footprint counts one f32 per state slot, warp along v and row of the tile (it did not),
    holds what the kernel allocates, and the memory table lists them."""
    _, p = same_tiling
    kp = _fused(p)
    warps, group = dict(kp.choice.warps), dict(kp.choice.group)
    assert warps["s_v"] > 1
    without = evaluate(replace(kp.model, columns=()), kp.columns, kp.choice, p.sizes, p.target)
    merged = 3 * warps["s_v"] * group["t"] * 4
    assert kp.cost.levels[1].M - without.levels[1].M == merged
    prog = lower(p)
    sizes = {param: p.sizes[axis] for param, axis in prog.size_params}
    (k,) = [k for k, kp2 in zip(prog.kernels, p.kernels) if kp2 is kp]
    assert k.smem_bytes(sizes) <= kp.cost.levels[1].M
    (row,) = [b for b in buffers(p, kp) if b["role"] == "merged across warps"]
    assert row["bytes"] == merged and row["shape"] == [["warps", warps["s_v"]], ["t", group["t"]]]


def test_the_label_is_read_once_per_row_not_per_element():
    """The fold over a lane's fragment elements compares each column with the row's label
    read before it into registers (one read per lane and row), not read at every element."""
    p = plan(_ce(), "h100", {"t": 19, "m": 37, "v": 71})
    source = render(lower(p))
    filled = re.findall(r"rv0\[i0\]\[i5\] = .*", source)
    assert len(filled) == 1 and re.search(r"\bp\d+\[", filled[0])       # (label[row])
    start = source.index("\n", source.index(filled[0]))
    fold = source[start:source.index("__shfl_xor_sync", start)]
    assert "== rv0[i0][i2 / 2]" in fold and not re.search(r"\bp\d+\[", fold)


def test_a_products_split_reduction_runs_on_the_tensor_cores_of_its_operands_dtype():
    """A split of the product's reduced axis reads each operand through the split's window
    (`where(.., gather, 0.0)`): its products are priced at the operands' 16-bit tensor-core
    rate, not as f32 products with no tensor time (which made a split of m look cheaper than
    the product it splits: the a100's Llama-3 head ran Z through global memory at 13.7 ms,
    the tensor cores' peak alone being 13.8 ms)."""
    p = plan(_ce(), "h100", {"t": 200, "m": 300, "v": 100}, overrides={"split": {"m": 2}})
    (kp,) = [kp for kp in p.kernels if kp.schedule.tensor_cores]
    assert [w.dtype for w in kp.model.work if w.engine == "contraction"] == ["f16"]
    assert dict(kp.cost.flops)[("contraction", "f16")] == 2 * 200 * 300 * 100
    tensor = dict(kp.cost.compute_parts)["tensor"]
    assert tensor == pytest.approx(2 * 200 * 300 * 100 / p.target.rate("tensor_f16"), rel=0.5)


@pytest.mark.thorough       # (2 plans each at a Llama-3 size: some 1.4 CPU-s)
@pytest.mark.parametrize("target, t, v", [
    ("a100", 4096, 128256), ("h100", 4096, 128256), ("h100", 8192, 128256),
    ("a100", 8192, 128256), ("h100", 4096, 256000)])
def test_a_large_vocabulary_fuses_in_more_parts(target, t, v):
    """Llama-3's vocabulary (128256) and Gemma's (256000) are wider than MAX_PARTS shares of
    a tile: the planner splits v in as many parts as shares of 128 or 256 columns need (past
    MAX_PARTS) and lowers the product with its statistics in the epilogue, Z never stored,
    faster than the plan that stores Z (model)."""
    shape = {"t": t, "m": 4096, "v": v}
    p = plan(_ce(), target, shape)
    kp = _fused(p)
    share = dict(kp.choice.group)["s_v"]
    assert p.split.axis == "v" and p.split.parts == -(-v // share) and share in (128, 256)
    assert len(p.kernels) == 2 and not p.kernels[1].schedule.tensor_cores   # (the merge)
    stored = plan(_ce(), target, shape, overrides={"split": {"v": 1}})
    assert float(p.time) < float(stored.time)
