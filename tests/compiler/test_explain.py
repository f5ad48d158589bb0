"""napkin explain: the report's content and JSON shape, fusion decisions and their reasons."""

from __future__ import annotations

import json
import os

import pytest

import napkin
from napkin.cli import main
from napkin.explain import render_text, report
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names

SHAPE = {"b": 2, "h": 8, "q": 4096, "x": 4096}
THOROUGH = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2


def run_cli(capsys, *args):
    capsys.readouterr()
    status = main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_json_has_the_documented_fields(capsys):
    status, out, err = run_cli(capsys, "explain", "attention", "--target", "h100",
                               "--shape", "b=2,h=8,q=4096,x=4096", "--json")
    assert status == 0, err
    rep = json.loads(out)
    assert rep["target"] == "h100"
    (k,) = rep["kernels"]
    for key in ("name", "levels", "buffers", "flops", "predicted_seconds", "bound"):
        assert key in k
    for lv in k["levels"]:
        for key in ("level", "capacity_bytes", "M_bytes", "H_bytes", "axes"):
            assert key in lv
        for info in lv["axes"].values():
            assert info["kind"] in ("group", "stream", "whole") and isinstance(info["size"], int)
    smem = k["levels"][0]
    assert smem["axes"]["q"]["kind"] == "group" and smem["axes"]["x"]["kind"] == "stream"
    for b in k["buffers"]:
        assert set(b) >= {"name", "role", "shape", "level", "bytes"}
        assert all(isinstance(n, str) and (s is None or isinstance(s, int)) for n, s in b["shape"])
    assert set(rep["unfused"]) >= {"H_bytes", "predicted_seconds"}
    assert rep["unfused"]["H_bytes"] > rep["H_bytes"]


def test_text_is_in_the_papers_notation(capsys):
    status, out, _ = run_cli(capsys, "explain", "attention", "--shape", "b=2,h=8,q=4096,x=4096")
    assert status == 0
    assert "q -> g_q = " in out and "x -> s_x = " in out and "d whole (64)" in out
    assert "online softmax" in out and "2*b*d*h*q*(g_q + x)/g_q" in out
    assert "fusion moves" in out and "predicted" in out


def test_group_and_stream_override_the_search(capsys):
    status, out, _ = run_cli(capsys, "explain", "attention", "--shape", "b=2,h=8,q=4096,x=4096",
                             "--group", "q=64", "--stream", "x=32", "--json")
    k = json.loads(out)["kernels"][0]
    assert k["levels"][0]["axes"]["q"]["size"] == 64 and k["levels"][0]["axes"]["x"]["size"] == 32


def _shape_of(d):
    return {a: SHAPE.get(a, 1024) for a, s in d.axes.items() if s is None}


def test_attention_and_attention_manual_fuse_into_equal_plans():
    plans = [plan(napkin.load(n), "h100", SHAPE) for n in ("attention", "attention_manual")]
    assert [len(p.kernels) for p in plans] == [1, 1]
    a, b = (p.kernels[0] for p in plans)
    assert a.choice == b.choice
    assert a.cost.time == b.cost.time and a.cost.levels == b.cost.levels
    ra, rb = (report(p)["kernels"][0] for p in plans)
    strip = lambda bs: [(x["role"], x["shape"], x["level"], x["bytes"]) for x in bs]  # noqa: E731
    assert strip(ra["buffers"]) == strip(rb["buffers"])


def test_mlp_boundary_is_explained():
    p = plan(napkin.load("mlp"), "h100", {"t": 4096, "m": 4096, "f": 16384, "o": 4096})
    assert len(p.kernels) == 2
    reason = p.kernels[1].kernel.reason
    assert reason.startswith("H goes through global memory") and "recomputes" in reason


def test_layernorm_is_one_kernel_when_rows_fit():
    p = plan(napkin.load("layernorm"), "h100", {"r": 4096, "c": 4096})
    assert len(p.kernels) == 1 and p.kernels[0].model.streaming.passes == 1


def test_layernorm_long_rows_need_two_passes_and_say_so():
    p = plan(napkin.load("layernorm"), "h100", {"r": 4096, "c": 1 << 17})
    if len(p.kernels) == 1:
        st = p.kernels[0].model.streaming
        assert st.axis == "c" and st.passes == 2
    else:   # the statistics and the normalisation split: the boundary names the passes
        assert "2 passes over c" in p.kernels[-1].kernel.reason
        assert {"mu", "var"} <= set(report(p)["kernels"][0]["equations"])


TARGETS = ["two-level", "a100", "h100", "hopper-toy"]


@pytest.mark.parametrize("name", library_names())
@pytest.mark.parametrize("target", TARGETS[:3] + [pytest.param("h200", marks=pytest.mark.thorough)]
                         + TARGETS[3:])
def test_every_library_diagram_plans_on_every_target(name, target):
    """Every diagram plans on every target within each level's capacity; its report (with the
    unfused baseline) is JSON on one target per diagram, the four in turn, so every target's
    report is made for a quarter of the library (a cold run's report is some 0.1 CPU-s of
    sympy figures a kernel, 14 CPU-s over the 88); on each with NAPKIN_FUZZ_SCALE >= 2."""
    d = napkin.load(name)
    p = plan(d, target, _shape_of(d))
    assert p.kernels and p.time > 0
    for kp in p.kernels:
        assert all(lc.M <= lc.capacity for lc in kp.cost.levels[1:])
    names = library_names()
    if THOROUGH or TARGETS.index(target) == names.index(name) % len(TARGETS):
        rep = report(p)
        json.dumps(rep)


def test_explain_shows_ptxas_beside_the_plan(capsys):
    status, out, _ = run_cli(capsys, "explain", "softmax", "--shape", "r=4096,c=4096", "--arch", "sm_80")
    assert status == 0 and "ptxas (sm_80):" in out and "0 bytes of spills" in out
    # the occupancy re-checked with ptxas's registers: at most 32 blocks of 32 threads here,
    # and never more than the register file holds
    import re
    found = re.search(r"ptxas \(sm_80\): (\d+) registers.*\n.*with ptxas's registers: (\d+) "
                      r"block\(s\) per SM limited by (\w+)", out)
    assert found, out
    registers, blocks = int(found.group(1)), int(found.group(2))
    assert 1 <= blocks <= 32 and blocks * 32 * -(-registers // 8) * 8 <= 65536


@pytest.mark.parametrize("fn, words", [
    ("sum", "running sum"), ("max", "running max"), ("min", "running min"),
    ("mean", "running sum and count"), ("logsumexp", "running max and sum of exp"),
    ("argmax", "running max and its first position"), ("argmin", "running min and its first position"),
])
def test_every_streamed_reduction_is_named_in_explain(fn, words):
    """A row too long for one block is streamed through the reduction's accumulator, and
    explain names it (argmax and argmin had no name: a KeyError, an internal error)."""
    dtype = "i32" if fn.startswith("arg") else "f32"
    d = napkin.load(f"axis t, v\nin Z[t v]: f32\nY[t] = {fn}[v](Z)\nout Y: {dtype}\n")
    # rows enough to fill the GPU: unsplit (memory-bound either way: since the CUDA-core refit
    # the splitting search's price takes v in 8, 662 us against 657 us unsplit, model)
    p = plan(d, "h100", {"t": 4096, "v": 1 << 17}, {"split": {"v": 1}})
    (kernel,) = report(p)["kernels"]
    assert kernel["streaming"]["axis"] == "v", kernel["streaming"]
    assert kernel["streaming"]["accumulators"] == [words]


def test_engine_buffers_name_an_operand_computed_by_an_earlier_kernel():
    """A bilinear form s[b] = x W y plans on hopper-toy as two kernels: the second streams j
    through `x W` (a contraction the first stored), and the engine's buffer table read `.name`
    of that Contract op (AttributeError: an internal error from `napkin explain`). The table
    names it as the rest of the report does (and its buffers had a dimension `g_None`), and
    the plan still computes the reference."""
    import numpy as np
    from napkin.runtime.compare import references, check
    from napkin.runtime.interpret import interpret
    d = napkin.load("axis b, i, j\nin x[b i]: f32\nin W[i j]: f32\nin y[b j]: f32\n"
                    "s[b] = x * W * y\nout s: f32\n")
    p = plan(d, "hopper-toy", {"b": 1024, "i": 1024, "j": 1024})
    assert len(p.kernels) == 2
    buffers = [buf for k in report(p)["kernels"] for buf in k["buffers"]]
    assert "y/s:contract[i]" in [buf["name"] for buf in buffers], buffers
    # the second kernel groups no woven axis beyond 1: its buffers have no rows' dimension
    assert not any("None" in str(buf["shape"]) for buf in buffers), buffers
    small = plan(d, "hopper-toy", {"b": 3, "i": 31, "j": 33})
    rng = np.random.default_rng(5)
    inputs = {"x": rng.uniform(-1, 1, (3, 31)).astype(np.float32),
              "W": rng.uniform(-1, 1, (31, 33)).astype(np.float32),
              "y": rng.uniform(-1, 1, (3, 33)).astype(np.float32)}
    ref, low, order = references(d, inputs, small)
    assert check(interpret(small, inputs)["s"], ref["s"], low["s"], "f32", "s", order["s"]).ok


def test_a_mask_read_by_a_softmax_and_a_logsumexp_is_named_once():
    """Both reductions of one masked score skip the same chunks: the condition is one
    disjunct (it was printed `(c) or (c)`, and the model held it twice)."""
    d = napkin.load("axis q, x\naxis d = 16\nin Q[q d]: f16, K[x d]: f16, V[x d]: f16\n"
                    "S[q x] = where(x <= q, Q * K, -inf)\nO[q d] = softmax[x](S) * V\n"
                    "L[q] = logsumexp[x](S)\nout O: f16, L: f32\n")
    skips = [k["streaming"]["skips"] for k in report(plan(d, "h100", {"q": 40, "x": 40}))["kernels"]
             if k["streaming"] and k["streaming"].get("skips")]
    assert [s["condition"] for s in skips] == ["x <= q"]


def test_an_attention_whose_scores_another_kernel_computes_says_so():
    """V in f32: P V cannot take the tensor cores, so the planner computes S on them in a
    kernel of its own; the softmax's kernel's reason names that (it said the scores were
    'not one contraction', which reads as a diagram problem)."""
    text = ("axis b, h, q, x\naxis d = 64\nin Q[b h q d]: f16\nin K[b h x d]: f16\n"
            "in V[b h x d]: f32\nS[b h q x] = Q * K / sqrt(size(d))\n"
            "P[b h q x] = softmax[x](S)\nO[b h q d] = P * V\nout O: f32\n")
    p = plan(napkin.load(text), "h100", {"b": 4, "h": 16, "q": 4096, "x": 4096})
    out = render_text(report(p))
    assert "the scores are computed by another kernel and read here (S stored)" in out, out


def test_an_attention_whose_scores_sum_nothing_says_so():
    """`softmax[x](Q * K / 8) * V` with d kept (warning N0705: one softmax per d) runs in one
    kernel, yet explain said its scores were 'computed by another kernel and read here (S
    stored)': no kernel computes them, they are no contraction (a sweep of unseen diagrams)."""
    text = ("axis b, q, x\naxis d = 32\nin Q[b q d]: f16, K[b x d]: f16, V[b x d]: f16\n"
            "O[b q d] = softmax[x](Q * K / 8) * V\nout O: f16\n")
    p = plan(napkin.load(text), "h100", {"b": 2, "q": 65, "x": 97})
    out = render_text(report(p))
    assert len(p.kernels) == 1 and "the scores sum nothing" in out and "S stored" not in out, out


MERGED_READ = """axis t, m, h, d
in A[t m]: f16
in W[m h d]: f16
in W2[m h d]: f16
P[h d t] = A * W
Y[t m] = P * W2
Z[h t] = sum[d](P)
out Y: f16, Z: f32
"""


def test_a_product_over_merged_axes_is_explained_as_such(tmp_path, capsys):
    """Y contracts h d as one axis (h*d) (local_merge.py) while Z reads P with h and d apart:
    P goes through global memory, and explain says it is the merged read (not a split's
    merge), and lists only the axes Y's kernel has (not h and d, which it reads merged)."""
    path = tmp_path / "merged.napkin"
    path.write_text(MERGED_READ)
    status, out, _ = run_cli(capsys, "explain", str(path), "--target", "h100",
                             "--shape", "t=512,m=256,h=4,d=64")
    assert status == 0
    y = out[out.index("computes Y"):out.index("computes Z")]
    assert "P goes through global memory: the product here reads h d as one axis (h*d)" in y
    assert "split partial states" not in y
    (smem,) = [line for line in y.splitlines() if line.startswith("  smem ")]
    assert "(h*d) -> s_(h*d)" in smem and "h whole" not in smem and "d whole" not in smem
