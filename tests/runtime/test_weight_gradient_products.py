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

import napkin
from napkin.compiler import stored16
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT
from napkin.pipeline import run_plan

from .close import assert_close

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
    assert {"N1", "t14"} <= {line.split()[0] for line in stored16.said(p)}
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
