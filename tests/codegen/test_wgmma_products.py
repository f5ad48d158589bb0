"""Products lowered on wgmma (codegen/wgmma.py), emulated against the float64 reference at odd
sizes (tails in every axis), f16 and bf16, with an epilogue and batch axes; the schedule's
checks (compiler/wgmma.py). The plans are given their wgmma tiling by `with_choices`, so
the tilings under test do not depend on what the planner prefers. wgmma is opt-in until a GPU
has run it: `h100:arch=sm_90a` (`--arch sm_90a`), WGMMA below; plain h100 plans mma.sync."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import napkin
from napkin.compiler.cost import Choice
from napkin.compiler.plan import plan
from napkin.compiler.variants import with_choices
from napkin.diagrams.diagnostics import NapkinError

WGMMA = "h100:arch=sm_90a"
MATMUL = """axis m, k, n
in A[m k]: {dt}
in B[k n]: {dt}
C[m n] = A * B
out C: {dt}
"""
# B stored with the contracted axis contiguous (a linear layer's weight W[o i]): K-major B
LINEAR_T = """axis t, i, o
in X[t i]: {dt}
in W[o i]: {dt}
in bias[o]: f32
Y[t o] = relu(X * W + bias)
out Y: {dt}
"""
# A stored with its rows contiguous (A[k m]): M-major A, one warpgroup
COLUMNS = """axis m, k, n
in A[k m]: {dt}
in B[k n]: {dt}
C[m n] = A * B
out C: f32
"""


def wgmma_plan(d, sizes, rows, cols, red, bm, bn, bk, target=WGMMA, batch=()):
    p = plan(d, target, sizes)
    choice = Choice(group=tuple(sorted(((rows, bm), (cols, bn)) + tuple((b, 1) for b in batch))),
                    stream=(red, bk),
                    thread=((rows, 64), (cols, bn)), warps=((rows, bm // 64), (cols, 1)),
                    instruction="wgmma")
    return with_choices(p, [choice])


NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def emulated(p, d, rng):
    """Run plan `p` of diagram `d` on the CPU emulator on random inputs (in their storage
    dtypes) and check every output against the float64 reference by the tolerance rule."""
    from napkin.pipeline import run_plan
    from napkin.runtime import compare, reference
    inputs = {}
    for a in p.diagram.inputs:
        shape = tuple(int(p.sizes[x]) for x in a.axes)
        inputs[a.name] = rng.standard_normal(shape).astype(NUMPY[a.dtype])
    out = run_plan(p, inputs, p.sizes)
    ref = reference.evaluate(d, inputs)
    low = reference.evaluate(d, inputs, precision="lowp")
    for o in p.diagram.outputs:
        verdict = compare.check(out[o.name], ref[o.name], low[o.name], o.dtype, o.name)
        assert verdict.ok, verdict.message
    return out


@pytest.mark.parametrize("dt,m,k,n,bm,bn,bk", [
    ("f16", 200, 129, 136, 128, 64, 64),     # two warpgroups, 128-byte swizzles, tails everywhere
    ("bf16", 65, 17, 33, 64, 32, 32),        # 64-byte swizzles, a k shorter than a chunk
    ("f16", 1, 257, 8, 64, 8, 16),           # one row; N = 8 (B's rows one chunk, unswizzled)
    ("bf16", 129, 65, 300, 128, 256, 32),    # B's rows in four blocks of 64 (TileLayout.block)
    ("f16", 200, 136, 136, 128, 64, 64),     # rows a multiple of 8: staged by cp.async, fenced
])
def test_matmul_on_wgmma_matches_float64(rng, dt, m, k, n, bm, bn, bk):
    d = napkin.load(MATMUL.format(dt=dt))
    p = wgmma_plan(d, {"m": m, "k": k, "n": n}, "m", "n", "k", bm, bn, bk)
    assert p.kernels[0].schedule.instruction == "wgmma"
    emulated(p, d, rng)


@pytest.mark.thorough
@pytest.mark.parametrize("dt,t,i,o,bm,bn,bk", [
    ("bf16", 129, 65, 257, 128, 256, 32),    # K-major B, N = 256, two warpgroups
    ("f16", 17, 64, 100, 64, 96, 64),        # N = 96, one warpgroup
])
def test_linear_epilogue_on_wgmma(rng, dt, t, i, o, bm, bn, bk):
    d = napkin.load(LINEAR_T.format(dt=dt))
    p = wgmma_plan(d, {"t": t, "i": i, "o": o}, "t", "o", "i", bm, bn, bk)
    emulated(p, d, rng)


@pytest.mark.thorough
def test_m_major_a_and_batch_axes_on_wgmma(rng):
    d = napkin.load(COLUMNS.format(dt="f16"))
    p = wgmma_plan(d, {"m": 63, "k": 40, "n": 24}, "m", "n", "k", 64, 16, 16)
    emulated(p, d, rng)
    p = wgmma_plan(d, {"m": 130, "k": 40, "n": 17}, "m", "n", "k", 128, 32, 16)  # A in blocks
    emulated(p, d, rng)
    d = napkin.load("batched_matmul")
    p = wgmma_plan(d, {"b": 3, "m": 70, "k": 33, "n": 40}, "m", "n", "k", 64, 32, 32, batch=("b",))
    assert dict(p.kernels[0].schedule.tile)["b"] == 1
    emulated(p, d, rng)


def test_wgmma_schedule_is_refused_where_it_cannot_run():
    d = napkin.load(MATMUL.format(dt="f16"))
    sizes = {"m": 128, "k": 64, "n": 64}
    with pytest.raises(NapkinError, match="N0604.*wgmma.*no wgmma"):
        wgmma_plan(d, sizes, "m", "n", "k", 64, 64, 64, target="a100")
    with pytest.raises(NapkinError, match="warpgroups"):
        p = plan(d, WGMMA, sizes)
        with_choices(p, [Choice(group=(("m", 64), ("n", 64)), stream=("k", 64),
                                thread=(("m", 32), ("n", 32)), warps=(("m", 2), ("n", 2)),
                                instruction="wgmma")])
    with pytest.raises(NapkinError, match="not one a wgmma descriptor describes"):
        wgmma_plan(d, {"m": 128, "k": 64, "n": 96}, "m", "n", "k", 64, 96, 64)  # B rows 192 B
    with pytest.raises(NapkinError, match="instruction 'hmma'"):
        p = plan(d, WGMMA, sizes)
        with_choices(p, [Choice(group=(("m", 64), ("n", 64)), stream=("k", 64),
                                thread=(("m", 64), ("n", 64)), warps=(("m", 1), ("n", 1)),
                                instruction="hmma")])


def _has_cuobjdump() -> bool:
    from napkin.diagrams.diagnostics import BackendUnavailable
    from napkin.runtime import sass
    try:
        sass.find_tool("cuobjdump")
    except BackendUnavailable:
        return False
    return True


def test_the_plan_says_which_instruction(capsys):
    """h100 compiled for sm_90a (`--arch sm_90a`) plans matmul on wgmma, by the model's
    figures; a100, and h100 as it is (sm_90: wgmma not yet run on a GPU), keep mma.sync."""
    from napkin.cli import main
    shape = ["--shape", "m=4096,k=4096,n=4096"]
    for args, instruction in ((["--target", "h100", "--arch", "sm_90a"],
                               "wgmma.mma_async.sync.aligned.m64n"),
                              (["--target", "h100"], "mma.sync.aligned.m16n8k16"),
                              (["--target", "a100"], "mma.sync.aligned.m16n8k16")):
        capsys.readouterr()
        assert main(["explain", "matmul", *args, *shape]) == 0
        out = capsys.readouterr().out
        assert f"on tensor cores: {instruction}" in out, out
    d = napkin.load(MATMUL.format(dt="f16"))
    p = plan(d, WGMMA, {"m": 4096, "k": 4096, "n": 4096})
    assert p.kernels[0].choice.instruction == "wgmma"
    # the decision is the model's: the faster of the two instructions' best tilings
    mma = plan(d, "h100", {"m": 4096, "k": 4096, "n": 4096})
    assert mma.kernels[0].choice.instruction == "mma.sync"
    assert p.kernels[0].cost.time < mma.kernels[0].cost.time


@pytest.mark.thorough      # (wgmma is opt-in: its SASS checked with the thorough tier)
@pytest.mark.skipif(not _has_cuobjdump(), reason="cuobjdump wheel not installed (napkin[test])")
def test_h100_matmul_cubin_holds_hgmma(capsys, tmp_path):
    """`napkin compile matmul --target h100 --emit cubin --arch sm_90a`: the main loop issues
    HGMMA and no HMMA or LDSM (static SASS); ptxas serialises no wgmma."""
    from napkin.cli import main
    from napkin.runtime import mainloop, sass
    out = tmp_path / "m.cubin"
    capsys.readouterr()
    assert main(["compile", "matmul", "--target", "h100", "--emit", "cubin", "--arch", "sm_90a",
                 "-o", str(out)]) == 0
    loop = mainloop.main_loop(sass.disassemble(out.read_bytes()))
    ops = [i.opcode for i in loop.instructions]
    assert any(op.startswith("HGMMA.64x") for op in ops), ops
    assert not any(op.startswith(("HMMA", "LDSM")) for op in ops)
    capsys.readouterr()
    assert main(["compile", "matmul", "--target", "h100", "--arch", "sm_90a"]) == 0
    from napkin.runtime import nvrtc
    log = nvrtc.compile(capsys.readouterr().out, arch="sm_90a").log
    assert "C7514" not in log and "C7517" not in log and " 0 bytes spill stores" in log, log


def test_the_arch_is_a_target_parameter():
    from napkin.compiler import target as targets
    from napkin.diagrams.diagnostics import UsageError
    assert targets.load("h100").arch == "sm_90" and targets.load("a100").arch == "sm_80"
    hopper = targets.load("h100:arch=sm_90a")
    assert hopper.arch == "sm_90a" and hopper.name == "h100:arch=sm_90a"
    assert targets.load("two-level:M=49152,arch=sm_80").arch == "sm_80"
    with pytest.raises(UsageError, match="N0804"):
        targets.load("h100:arch=hopper")


@pytest.mark.thorough
@pytest.mark.parametrize("name", ["matmul", "linear_gelu", "gelu_erf", "mlp", "swiglu"])
def test_large_h100_products_compile_without_spills(name):
    """At 4096 the wgmma tiles are the widest (64 x 256): ptxas (sm_90a) spills nothing and
    serialises no wgmma (the register estimate charges the epilogue's column vectors and
    erf: occupancy.fragment_values, WGMMA_EPILOGUE_REGISTERS)."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.runtime import nvrtc
    d = napkin.load(name)
    p = plan(d, WGMMA, {a: 4096 for a, s in d.axes.items() if s is None})
    out = nvrtc.compile(render(lower(p)), arch="sm_90a")
    assert all(r.spill_stores == 0 for r in out.resources.values()), out.log
    assert "C7514" not in out.log
