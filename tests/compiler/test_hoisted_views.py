"""A row factor taken out of a product through names (canonical._hoisted, `_factors` looks
through `t12 = N`) left the named statement's views of inputs (`X[b t m2]`, `g1[m2]`) read by
the product's statement: N's kernel was made to store a view of X, which no tiling holds
(N0603 at any size, the MLP gradient of a normed block once rename.py computed N under the
name its copy reads it with). The product now reads the inputs through views of its own."""

from __future__ import annotations

import numpy as np

import napkin
from napkin.compiler.plan import plan

from ..runtime.close import assert_close

TEXT = """axis b, t, m, f, m2
in X[b t m]: f16
in g1[m]: f16
in W1[m f]: f16
N[b t m2] = (X[b t m2] * rsqrt(mean[m](X * X) + 1e-06)) * g1[m2]
t12[b t m2] = N
t14[b t f] = t12 * W1[m2 f]
G[b f m2] = t14 * t12
out G: f32
"""


def test_a_factor_hoisted_through_a_copy_leaves_no_view_of_an_input_to_store(rng):
    d = napkin.load(TEXT)
    p = plan(d, "h100", {"b": 2, "t": 1024, "m": 1024, "f": 512})     # (was N0603)
    g = p.graph
    from napkin.compiler import ir
    for kp in p.kernels:        # nothing stored is a view of an input
        for n in kp.kernel.stores:
            op = ir.op(g, n)
            assert not (isinstance(op, ir.View)
                        and isinstance(ir.op(g, ir.operands(g, n)[0]), ir.Input)), kp.kernel
    b, t, m, f = 2, 37, 24, 40
    X = rng.standard_normal((b, t, m)).astype(np.float16)
    g1 = (1 + 0.1 * rng.standard_normal(m)).astype(np.float16)
    W1 = (rng.standard_normal((m, f)) * m ** -0.5).astype(np.float16)
    (want,) = napkin.run(d, X, g1, W1, backend="reference")
    from napkin.pipeline import run_plan
    small = plan(d, "h100", {"b": b, "t": t, "m": m, "f": f})
    got = run_plan(small, dict(X=X, g1=g1, W1=W1), dict(b=b, t=t, m=m, f=f, m2=m))["G"]
    assert_close(got, want, "f32", slack=3.0)
