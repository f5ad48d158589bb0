"""Which kernels the planner puts on tensor cores, with which tiles, and what explain says."""

from __future__ import annotations

import json

import pytest

import napkin
from napkin.compiler import ir, tensorcore
from napkin.compiler import occupancy
from napkin.compiler.kernels import fused_kernel
from napkin.explain import report
from napkin.compiler.plan import plan

from .test_explain import run_cli

SQUARE = {"m": 4096, "k": 4096, "n": 4096}
# h100 compiled for plain sm_90: mma.sync's rules (sm_90a plans these products on wgmma:
# tests/codegen/test_wgmma_products.py)
MMA = "h100:arch=sm_90"


def matmul(dtype="f16", a="A[m k]", b="B[k n]"):
    return napkin.load(f"axis m, k, n\nin {a}: {dtype}\nin {b}: {dtype}\nC[m n] = A * B\nout C: {dtype}")


def engine(p, i=0):
    return report(p)["kernels"][i]["engine"]


def test_a_large_product_runs_on_tensor_cores_within_the_rules():
    p = plan(matmul(), MMA, SQUARE)
    (kp,) = p.kernels
    site = tensorcore.site(p.graph, kp.kernel, kp.model, p.target, p.sizes)
    wm, wn, tm, tn = tensorcore.warp_tile(kp.choice, site, p.sizes)
    group = dict(kp.choice.group)
    assert (site.row, site.col, site.red) == ("m", "n", "k")
    assert group["m"] == wm * tm and group["n"] == wn * tn
    assert tm % 16 == 0 and tn % 8 == 0 and kp.choice.stream[1] % 16 == 0
    assert wm * wn in (1, 2, 4, 8) and kp.cost.threads == 32 * wm * wn
    assert tm * tn // 32 <= tensorcore.MAX_ACCUMULATORS
    eng = engine(p)
    assert eng["kind"] == "tensor cores" and eng["warps"] == [wm, wn]
    assert eng["fragments"] == [tm // 16, tn // 8]


def test_tensor_cores_are_predicted_faster_than_the_cuda_cores_at_scale():
    fast = plan(matmul(), "h100", SQUARE)
    slow = plan(matmul(), "h100", SQUARE, engine="cuda-cores")
    assert not slow.kernels[0].choice.warps
    assert fast.time * 2 < slow.time
    assert engine(slow)["why"] == "tensor cores are off"


def test_tiny_products_stay_on_the_cuda_cores():
    """One 16 x 8 fragment tile padded around a 16 x 5 product is one warp walking k in steps
    of 16, each product waiting on the last (6.9 us, model); the CUDA cores split k and the
    columns over their lanes (4.1 us). (At 3 x 7 x 5 both engines are launch-bound, 2.8 and
    3.0 us: a tie the model settles either way.)"""
    p = plan(matmul(), "h100", {"m": 16, "k": 1024, "n": 5})
    assert not p.kernels[0].choice.warps
    assert engine(p)["why"] == "predicted faster on the CUDA cores at these sizes"


@pytest.mark.parametrize("d, why", [
    (matmul("f32"), "operands are f32 and f32"),
    (napkin.load("axis m, k, n\nin A[m k]: f16\nin B[k n]: bf16\nC[m n] = A * B\nout C: f32"),
     "operands are f16 and bf16"),
    (napkin.load("axis m, k\nin A[m k]: f16\nin x[k]: f16\ny[m] = A * x\nout y: f16"),
     "not a matrix-vector one"),
    (napkin.load("axis m, k, n\nin A[m k]: f16\nin B[k n]: f16\nC[m n] = cumsum[k](A) * B\nout C: f16"),
     "not loaded or computed elementwise from loads"),
    (napkin.load("axis q, x, d\nin Q[q d]: f16\nin K[x d]: f16\nin V[x d]: f16\n"
                 "S[q x] = Q * K\nP[q x] = softmax[x](S)\nO[q d] = P * V\nout O: f16"),
     "`d` must be static"),
    (napkin.load("axis q, x\naxis d = 64\nin Q[q d]: f32\nin K[x d]: f32\nin V[x d]: f32\n"
                 "S[q x] = Q * K\nP[q x] = softmax[x](S)\nO[q d] = P * V\nout O: f32"),
     "Q, K, V are f32"),
    (napkin.load("axis q, x\naxis d = 64\nin Q[q d]: f16\nin K[x d]: f16\nin V[x d]: f16\n"
                 "S[q x] = exp(Q) * K\nP[q x] = softmax[x](S)\nO[q d] = P * V\nout O: f16\n"
                 "out P: f16"),
     "fuses 2 contraction(s) with 1 other reduction(s)"),
])
def test_kernels_that_stay_on_the_cuda_cores_say_why(d, why):
    sizes = {a: 4096 for a, s in d.axes.items() if s is None}
    p = plan(d, "h100", sizes)
    whys = [engine(p, i).get("why", "") for i in range(len(p.kernels))]
    # the diagram as one kernel (the planner may split it instead: the cost model can
    # prefer the scores on tensor cores through global memory to a fused CUDA-core kernel),
    # its reductions unsplit (a split of one kernel rewrites it: f32 attention's P V)
    if p.graph.graph.get("split"):
        p = plan(d, "h100", sizes, {"split": {p.graph.graph["split"].axis: 1}})
    ops = {n for n in p.graph.nodes
           if not isinstance(ir.op(p.graph, n), (ir.Input, ir.Output))}
    whole = fused_kernel(p.graph, "all", ops)
    whys.append(str(tensorcore.best_site(p.graph, whole, p.target)))
    assert any(why in w for w in whys), whys


@pytest.mark.parametrize("target", ["hopper-toy", "two-level"])
def test_targets_without_mma_m16n8k16_stay_on_the_cuda_cores(target):
    p = plan(matmul(), target, SQUARE)
    assert not p.kernels[0].choice.warps
    assert "tensor cores" in engine(p)["why"]


def test_a100_and_h200_plan_tensor_cores_too():
    for target in ("a100", "h200"):
        assert plan(matmul("bf16"), target, SQUARE).kernels[0].choice.warps


def test_block_hints_choose_the_tensor_core_tile_and_thread_hints_keep_simt():
    d = napkin.load("axis m, k, n\nin A[m k]: f16\nin B[k n]: f16\n"
                    "C[m n] = A * B\ngroup m by 32\nstream k by 64\nout C: f16")
    (kp,) = plan(d, "h100", SQUARE).kernels
    assert kp.choice.warps and dict(kp.choice.group)["m"] == 32 and kp.choice.stream == ("k", 64)
    d = napkin.load("axis m, k, n\nin A[m k]: f16\nin B[k n]: f16\n"
                    "C[m n] = A * B\ngroup m by 4 at registers\nout C: f16")
    (kp,) = plan(d, "h100", SQUARE).kernels
    assert not kp.choice.warps and dict(kp.choice.thread)["m"] == 4
    d = napkin.load("axis m, k, n\nin A[m k]: f16\nin B[k n]: f16\n"
                    "C[m n] = A * B\ngroup m by 24\nout C: f16")    # not whole fragments
    (kp,) = plan(d, "h100", SQUARE).kernels
    assert not kp.choice.warps and dict(kp.choice.group)["m"] == 24


def test_the_plan_counts_the_shared_rows_as_laid_out_and_the_warp_level_registers():
    (kp,) = plan(matmul(), MMA, SQUARE).kernels
    group, bk = dict(kp.choice.group), kp.choice.stream[1]
    smem = kp.cost.levels[1].M
    # A [bm][bk] and B [bk][bn] halves, rows swizzled (compiler/tilelayout.py: no padding),
    # each stage 16-byte aligned
    layouts = dict(kp.schedule.layouts)
    assert {lay.kind for lay in layouts.values()} == {"swizzled"}
    assert sorted((lay.outer, lay.pitch) for lay in layouts.values()) == \
        sorted([(group["m"], bk), (bk, group["n"])])
    tiles = (group["m"] * bk + bk * group["n"]) * 2 * kp.schedule.stages
    assert tiles <= smem < tiles + 64
    # the register level's unit is a warp: its footprint (the accumulators among it) fits
    # when the fragment registers per lane, by the ptxas fit, fit a thread's registers
    regs = kp.cost.levels[2]
    tile = dict(kp.choice.thread)
    assert tile["m"] * tile["n"] * 4 <= regs.M <= regs.capacity
    fragments = tile["m"] * tile["n"] / 32 + tile["m"] / 4 + tile["n"] / 4
    base, slope = occupancy.REGISTERS["product"]
    assert kp.cost.registers == pytest.approx(base + slope * fragments)
    assert kp.cost.registers <= min(255, 65536 / kp.cost.threads)


def test_explain_prints_the_engine_line(capsys):
    status, out, _ = run_cli(capsys, "explain", "matmul", "--shape", "m=4096,k=4096,n=4096",
                             "--arch", "sm_90")
    assert status == 0 and "on tensor cores: mma.sync.aligned.m16n8k16 (f16 -> f32)" in out
    status, out, _ = run_cli(capsys, "explain", "matmul", "--shape", "m=4096,k=4096,n=4096",
                             "--engine", "cuda-cores", "--json")
    assert json.loads(out)["kernels"][0]["engine"] == {"kind": "cuda cores",
                                                       "why": "tensor cores are off"}


def test_compile_emits_mma_unless_told_not_to(capsys):
    args = ("compile", "matmul", "--shape", "m=4096,k=4096,n=4096", "--arch", "sm_90")
    status, on, _ = run_cli(capsys, *args)
    assert status == 0 and "napkin_mma_m16n8k16_f16(acc" in on and "napkin_ldmatrix_x4(fa" in on
    status, off, _ = run_cli(capsys, *args, "--engine", "cuda-cores")
    assert status == 0 and "napkin_mma" not in off.split("extern \"C\"", 1)[1]


ATTENTION = {"b": 4, "h": 16, "q": 4096, "x": 4096}


@pytest.mark.parametrize("name", ["attention", "causal_attention", "attention_manual"])
def test_attention_runs_flashattention_2_on_tensor_cores(name):
    d = napkin.load(name)
    p = plan(d, "h100", ATTENTION)
    (kp,) = p.kernels
    eng = engine(p)
    assert eng["kind"] == "tensor cores" and eng["algorithm"] == "FlashAttention-2"
    wm, tm = eng["warps"][0], eng["warp_tile"][0]
    assert tm % 16 == 0 and dict(kp.choice.group)["q"] == wm * tm and kp.cost.threads == 32 * wm
    assert kp.choice.stream[0] == "x" and kp.choice.stream[1] % 16 == 0
    assert eng["warp_tile"][1] == 64 and eng["fragments"] == [tm // 16, 8]
    simt = plan(d, "h100", ATTENTION, engine="cuda-cores")
    assert not simt.kernels[0].choice.warps and p.time * 1.5 < simt.time


def test_attention_tiles_stay_within_the_registers_at_head_size_128():
    from napkin.compiler import flash
    p = plan(napkin.load("attention", d=128), "h100", ATTENTION)
    (kp,) = p.kernels
    site = tensorcore.site(p.graph, kp.kernel, kp.model, p.target, p.sizes)
    assert isinstance(site, flash.FlashSite) and site.head == 128
    fm = dict(kp.choice.thread)["q"] // 16
    assert flash.registers(fm, kp.choice.stream[1], site, kp.choice.reread) <= flash.MAX_REGISTERS
    # the budget is what keeps ptxas from spilling, on both archs the targets name
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.runtime import nvrtc
    source = render(lower(p))
    for arch in ("sm_80", "sm_90"):
        (res,) = nvrtc.compile(source, arch=arch).resources.values()
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= 255, (arch, res)


def test_small_attention_says_the_cuda_cores_are_predicted_faster():
    # fewer rows than a fragment's 16 (two heads of 3 queries, 9 keys): b=2, h=3, q=77 (30
    # fragments) runs on tensor cores since the model counts a cp.async pipeline's bytes in
    # flight as hiding latency; since the CUDA-core refit (compiler/issue_simt.py, reads of K
    # and V priced from SASS) so does one head of 16 rows at 130 keys (4.60 us against 5.93,
    # model), and since the model charges the lanes' replicated softmax (issue_pair.py) two
    # heads of 7 queries (3.50 us); since a tile larger than its axis counts as one block
    # (cost.py, `launched`: it counted 3/16 of one) two heads of 3 queries at 9 keys too
    # (3.13 us against 3.75); here a single key in each 16-key chunk: 6.8 us on the tensor
    # cores, 3.2 us on the CUDA cores
    p = plan(napkin.load("attention", d=128), "h100", {"b": 1, "h": 3, "q": 40, "x": 1})
    assert not p.kernels[0].choice.warps
    assert engine(p)["why"] == "predicted faster on the CUDA cores at these sizes"


STORES_A_ROW_TOO = """\
axis h, q, x
axis d = 64
in Q[h q d]: f16
in K[h x d]: f16
in doc[x]: i32
t[q] = doc[q] + 1
S[h q x] = where(t == doc, Q * K, 0)
out S: f32, t: i32
"""


def test_a_kernel_storing_an_array_without_the_products_axes_stays_on_the_cuda_cores():
    """Blocks on tensor cores tile the product's rows, columns and batch axes; a kernel that
    also stores `t[q]` cannot group h or x (it was N0604 from the schedule instead: the
    plain gradient of varlen_attention on h100)."""
    from napkin.compiler.model import kernel_model
    d = napkin.load(STORES_A_ROW_TOO)
    p = plan(d, "h100", {"h": 8, "q": 4096, "x": 4096})
    ops = {n for n in p.graph.nodes if not isinstance(ir.op(p.graph, n), (ir.Input, ir.Output))}
    whole = fused_kernel(p.graph, "all", ops)
    why = tensorcore.examine(p.graph, whole, kernel_model(p.graph, whole, "d"), p.target,
                             p.sizes)
    assert why == "the kernel also stores arrays without `h`, which the tensor-core blocks tile"
    grad = napkin.grad("varlen_attention")
    assert plan(grad, "h100").time > 0          # every kernel with a legal schedule
