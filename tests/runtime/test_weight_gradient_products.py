"""A weight's gradient summing two axes as one tensor-core product where a forward value is a
factor (compiler/grad.py `_one_run`): `dWq[m h d] = dQ[b t h d] * N1[b t m]` sums `b t`,
adjacent in both, read as `(b*t)` (compiler/local_merge.py), where it was a partial per b
stored in f32 (`dWq_b[b m h d]`) and a sum over b on the CUDA cores. N1 is read as stored:
canonical.py hoists no factor out of a product local_merge.py reads as it is (hoisted, `X *
rsqrt(...)` was computed in the product's statement, where no reshape reads it), and N1,
copied renamed for K (`t14[b s m] = N1[b s m]`), is stored in 16 bits with its copy
(stored16.py: a copy another kernel reads links the two). Planned (engines, merges, storage
asserted) and emulated at small odd sizes against the float64 reference of the gradient."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import stored16
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT
from napkin.pipeline import run_plan

from .close import assert_close
from .test_block_parts import BLOCK_TEXT

NORMED = """axis b, t, s, m, h
axis d = 16
in X[b t m]: f16
in g1[m]: f16
in Wq[m h d]: f16, Wk[m h d]: f16
N1[b t m] = X * rsqrt(mean[m](X * X) + 1e-6) * g1
Q[b t h d] = N1 * Wq
K[b s h d] = N1[b s m] * Wk
out Q: f16, K: f16
"""


def _by_statement(p) -> dict:
    eqs = p.graph.graph["equations"]
    return {e.name: kp for kp in p.kernels for e in eqs
            if e.stmt in kp.kernel.equations and e.stmt not in kp.kernel.recomputed}


def test_a_weights_gradient_reads_the_forward_value_in_one_product(rng):
    d = napkin.grad(napkin.load(NORMED), wrt=["Wq", "Wk"])
    text = d.source.text
    assert "dWq[m h d] = dQ * N1" in text and "sum[b]" not in text, text
    p = plan(d, "h100", dict(b=2, t=512, s=512, m=512, h=4))
    kernels = _by_statement(p)
    merged = {axis for _, axis, _ in p.graph.graph["local_merged"]}
    assert {"(b*t)", "(b*s)"} <= merged, merged
    for name, axis in (("dWq", "(b*t)"), ("dWk", "(b*s)")):
        assert kernels[name].schedule.engine == PRODUCT, name
        assert axis in kernels[name].model.reduced, (name, kernels[name].model.reduced)
    said = {line.split()[0]: line for line in stored16.said(p)}
    assert {"N1", "t14"} <= set(said), said
    assert "copied into t14" in said["N1"], said      # explain names the copy it also reads
    b, t, m, h = 3, 37, 40, 3
    inputs = dict(X=rng.standard_normal((b, t, m)).astype(np.float16),
                  g1=(1 + 0.25 * rng.standard_normal(m)).astype(np.float16),
                  Wq=(rng.standard_normal((m, h, 16)) * m ** -0.5).astype(np.float16),
                  Wk=(rng.standard_normal((m, h, 16)) * m ** -0.5).astype(np.float16),
                  dQ=rng.standard_normal((b, t, h, 16)).astype(np.float16),
                  dK=rng.standard_normal((b, t, h, 16)).astype(np.float16))
    out = run_plan(p, inputs, dict(b=b, t=t, s=t, m=m, h=h))
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    for name in ("dWq", "dWk"):
        assert_close(out[name], want[name], "f16", slack=3.0)


BLOCK = BLOCK_TEXT.format(d=128)    # (test_block_parts: each part on its engine)


@pytest.mark.thorough       # (26 CPU-s of planning at the block's shape)
def test_the_blocks_weight_gradients_are_one_product_each():
    """The transformer block's gradient at b=2 t=s=m=2048 h=16 d=128 f=8192 on h100: dWq, dWk,
    dWv, dWo and dW1 (g51) each one tensor-core product over (b*t) or (b*s), no partial per b
    and no sum over it (model: 3.34 -> 3.18 ms, 36 -> 31 kernels)."""
    d = napkin.grad(napkin.load(BLOCK))
    assert "sum[b](" not in d.source.text, d.source.text
    p = plan(d, "h100", dict(b=2, t=2048, s=2048, m=2048, h=16, d=128, f=8192))
    kernels = _by_statement(p)
    for name in ("dWq", "dWk", "dWv", "dWo", "g51", "dW2"):
        k = kernels[name]
        assert k.schedule.engine == PRODUCT, name
        assert k.model.reduced in (("(b*t)",), ("(b*s)",)), (name, k.model.reduced)
    assert "N1" in {line.split()[0] for line in stored16.said(p)}
    assert len(p.kernels) <= 31 and sum(k.cost.time for k in p.kernels) < 3.25e-3
