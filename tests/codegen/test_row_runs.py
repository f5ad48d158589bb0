"""A store copying a row of a load (compiler/row_runs.py): each thread's 8 consecutive points
of a 16-bit embedding row (4 of an f32 one) as one 16-byte copy where the row's length is a
multiple of the run, value by value where not, run by the CPU emulator against the float64
reference at odd sizes next to the run and the block tile, with positions outside the table
(clamped to its nearest row)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import napkin
from napkin import pipeline
from napkin.diagrams.diagnostics import Source
from napkin.diagrams.sources import library_source
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan
from napkin.runtime import compare, reference

from .conftest import library


def _embedding(dtype: str, width: int):
    """The library's embedding in `dtype`, a thread's tile `width` positions of m."""
    text = library_source("embedding").text + f"group m by 256\ngroup m by {width} at registers\n"
    return napkin.load(Source(f"<embedding:{dtype}>", re.sub(r":\s*f16\b", f": {dtype}", text)))


# (planned at m, run at the second size: a runtime size not a multiple of the run takes the
# value-by-value loop)
@pytest.mark.parametrize("dtype, m, run", [("f16", 40, 40), ("bf16", 40, 37), ("f32", 264, 264),
                                           ("f32", 264, 263), ("f16", 264, 257)])
def test_an_embedding_copies_its_rows_in_runs(dtype, m, run):
    width = 16 // (2 if dtype != "f32" else 4)
    d = _embedding(dtype, width)
    p = plan(d, "h100", {"t": 37, "v": 11, "m": m})
    (kp,) = p.kernels
    assert kp.schedule.runs == ((kp.kernel.stores[0], width),)
    rng = np.random.default_rng(run)
    table = rng.standard_normal((11, run)).astype(np.float32)
    tok = rng.integers(-3, 14, size=37).astype(np.int32)   # some outside [0, 11): clamped
    inputs = {"E": table, "tok": tok}
    out = run_plan(p, inputs, {**p.sizes, "m": run})
    clamped = {"E": table, "tok": np.clip(tok, 0, 10)}   # (the reference refuses the others)
    ref = reference.evaluate(d, clamped)
    low = reference.evaluate(d, clamped, precision="lowp")
    verdict = compare.check(out["X"], ref["X"], low["X"], d.outputs[0].dtype, "X")
    assert verdict.ok, verdict.message
    # a copy: the table's row at each position, rounded to the dtype only
    expect = table[np.clip(tok, 0, 10)]
    assert np.allclose(np.asarray(out["X"], dtype=np.float64), expect,
                       rtol=0 if dtype == "f32" else 1e-2, atol=0)


def test_the_run_is_one_16_byte_copy_and_its_fallback_one_rolled_loop():
    p = plan(library("embedding", "f16"), "h100", {})
    cuda = pipeline.through(p, "plan", "cuda", pipeline.Options.make(target="h100"))["cuda"]
    body = cuda[cuda.index("__global__"):]
    assert body.count("cpd[0] = cps[0];") == 1
    assert len(re.findall(r"#pragma unroll 1\n\s*for \(int k\d+ = 0; k\d+ < 8;", body)) == 1
    assert body.count("p2[") == 1          # the fallback's one store, in its loop
