"""The CUDA-core reductions without per-element waste, run by the CPU emulator against the
float64 reference: a mean divided by its known count (no `cnt += 1` per element), a softmax
multiplied by its row's reciprocal (no division per element), a streamed running max and sum
taking one exponential per value (codegen/accum.fold_value), on odd sizes next to the
chunk's multiple, whole and streamed, with -inf, +inf and NaN rows beside ordinary ones."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import Source
from napkin.pipeline import run_plan
from napkin.runtime import compare

DIAGRAMS = {
    "softmax": "axis r, c\nin X[r c]: f32\nY[r c] = softmax[c](X)\nout Y: f32\n",
    "lse": "axis r, c\nin X[r c]: f32\nL[r] = logsumexp[c](X)\nout L: f32\n",
    "mean": "axis r, c\nin X[r c]: f32\nL[r] = mean[c](X) + sum[c](X * X)\nout L: f32\n",
    "layernorm": "axis r, c\nin X[r c]: f32\nmu[r] = mean[c](X)\nD[r c] = X - mu\n"
                 "Y[r c] = D * rsqrt(mean[c](D * D) + 1e-5)\nout Y: f32\n",
}


def _inputs(c: int, seed: int) -> dict:
    """Rows of random values, a row of -inf, one holding +inf, one a NaN, one of large
    values whose running max rises at every position (each value rescales the sum)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((7, c)).astype(np.float32) * 4
    x[1] = -np.inf
    x[2, c // 3] = np.inf
    x[3, c - 1] = np.nan
    x[4] = np.linspace(-80, 80, c, dtype=np.float32)
    return {"X": x}


@pytest.mark.parametrize("name", sorted(DIAGRAMS))
@pytest.mark.parametrize("c, stream", [(129, None), (257, 64), (255, 64)])   # the planner's, chunks
def test_a_cuda_core_reduction_matches_the_reference(name, c, stream):
    d = napkin.load(Source(f"<{name}>", DIAGRAMS[name]))
    overrides = {"stream": {"c": stream}} if stream else None
    p = plan(d, "h100", {"r": 7, "c": c}, overrides=overrides)
    (kp,) = p.kernels
    assert kp.schedule.engine == "cuda cores"
    if stream:
        assert kp.schedule.stream == ("c", stream)
    inputs = _inputs(c, c)
    if name in ("mean", "layernorm"):     # (+inf and NaN rows: no information in a mean)
        inputs["X"][1:4] = np.random.default_rng(1).standard_normal((3, c))
    out = run_plan(p, inputs, p.sizes)
    for array, verdict in compare.against_reference(d, inputs, out, p).items():
        assert verdict.ok, (array, verdict.message)


def test_the_emitted_reductions_keep_no_count_and_divide_once_per_row():
    """The CUDA of a streamed softmax and a mean, whole and streamed: no per-element count, one
    exponential per value in the statistics' chunk loop, the probabilities a product by the
    reciprocal. (A streamed variance is Welford's: its count and division per value stay.)"""
    from napkin import pipeline
    for name, stream in (("softmax", 64), ("mean", None), ("mean", 64)):
        d = napkin.load(Source(f"<{name}>", DIAGRAMS[name]))
        overrides = {"stream": {"c": stream}} if stream else None
        p = plan(d, "h100", {"r": 7, "c": 257}, overrides=overrides)
        cuda = pipeline.through(p, "plan", "cuda", pipeline.Options.make(target="h100"))["cuda"]
        body = cuda[cuda.index("__global__"):]
        assert "+ 1.0f;" not in body and "cnt" not in body, name
        if name == "softmax":
            fold = body[body.index("for (int xl"):body.index("__shfl_xor_sync")]
            assert fold.count("napkin_ex2(") == 1
            assert "/ st" not in body[body.rindex("for (int xl"):]
