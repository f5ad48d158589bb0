"""The cotangents of projections laid out for one product each (compiler/grad.py,
`_result_layout`): `V[b h s d] = X[b s m] * Wv[m h d]` gives `dV[b s h d]`, so the input's
share `dV * Wv` sums `h d`, adjacent in both, as one tensor-core product over `(h*d)` (where
it was a partial over d stored in f32 per head, `g[b s m h]`, and a sum over h on the CUDA
cores); rename.py computes it under the reader's `t`, reading `dV[b t h d]`, and the reshape
is read below that renaming view (compiler/local_merge.py). The text, the merged products
planned at small odd sizes and emulated against float64, and the gradient of projected
attention planned at scale and run at odd small sizes (thorough)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import stored16
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT
from napkin.pipeline import run_plan

from .close import assert_close

PROJECTED = """axis b, t, s, m, h
axis d = 16
in X[b t m]: f16
in Wq[m h d]: f16, Wk[m h d]: f16, Wv[m h d]: f16, Wo[h d m]: f16
Q[b h t d] = X * Wq
K[b h s d] = X[b s m] * Wk
V[b h s d] = X[b s m] * Wv
S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)
A[b t h d] = softmax[s](S) * V
R[b t m] = A * Wo
out R: f16
"""
# a computed array read renamed by a product over two axes (what rename.py makes of g22)
RENAMED = """axis b, s, t, m, h, d
in Vin[b s h d]: f16
in Wv[m h d]: f16
in Z[b h t d]: f16
dV[b s h d] = exp(Vin)
g[b t m] = dV[b t h d] * Wv
Y[b h s d] = dV + Z[b h s d]
out g: f16
out Y: f16
"""


def test_the_projections_cotangents_are_laid_out_for_one_product_each():
    text = napkin.grad(napkin.load(PROJECTED)).source.text
    for line in ("dV[b s h d] =", "dK[b s h d] =", "dQ[b t h d] =", "= dV * Wv", "= dK * Wk",
                 "= dQ * Wq"):
        assert line in text, text
    assert "sum[h]" not in text, text
    # attention's own cotangents keep their layout (FlashAttention's chains compute them)
    assert "dS[b h t s] =" in text and "dA[b t h d] =" in text, text


def test_a_product_over_two_axes_reads_a_renamed_array_through_one_reshape(rng):
    sizes = dict(b=2, s=37, t=37, m=40, h=3, d=16)
    p = plan(napkin.load(RENAMED), "h100", sizes, engine="tensor-cores")
    (k,) = [k for k in p.kernels if "(h*d)" in k.model.reduced]
    assert k.schedule.engine == PRODUCT
    Vin = (rng.standard_normal((2, 37, 3, 16)) * 0.5).astype(np.float16)
    Wv = (rng.standard_normal((40, 3, 16)) * 48 ** -0.5).astype(np.float16)
    Z = rng.standard_normal((2, 3, 37, 16)).astype(np.float16)
    out = run_plan(p, {"Vin": Vin, "Wv": Wv, "Z": Z}, sizes)
    want = np.einsum("bshd,mhd->bsm", np.exp(Vin.astype(np.float64)), Wv.astype(np.float64))
    assert_close(out["g"], want, "f16", slack=3.0)      # dV rounded to f16 as it is stored


@pytest.mark.thorough       # (planning projected attention's gradient at scale)
def test_projected_attentions_gradient_at_scale_runs_its_merged_products(rng):
    d = napkin.grad(napkin.load(PROJECTED))
    p = plan(d, "h100", {"b": 1, "t": 2048, "s": 2048, "m": 2048, "h": 16})
    # dX's three shares over (h*d) in one kernel (a sum of products: compiler/sums.py), dWq and
    # dWo over (b*t), dWk and dWv over (b*s): they read X through a view renaming t to s
    # (rename._read_through: no kernel copies X), and X's `b t` are one run of its memory, read
    # as `(b*t)` and renamed (local_merge._own): no sum over b after a product over s, 13 -> 11
    # kernels (model h100: 11.9 + 3.7 -> 11.8 us each, 228.8 -> 221.3 us in all)
    merged = [k for k in p.kernels if any(a.startswith("(") for a in k.model.reduced)]
    assert len(merged) == 5 and {k.schedule.engine for k in merged} == {PRODUCT}, \
        [(k.model.reduced, k.schedule.engine) for k in p.kernels]
    eqs = p.graph.graph["equations"]
    for name in ("dWk", "dWv"):
        (k,) = [k for k in p.kernels for e in eqs if e.name == name and e.stmt in k.kernel.equations]
        assert k.model.reduced == ("(b*s)",), (name, k.model.reduced)
    assert len(p.kernels) == 11, [(k.model.reduced, k.schedule.engine) for k in p.kernels]
    assert not any(k.model.reduced == () and k.schedule.engine == "cuda cores"
                   for k in p.kernels), [(k.model.reduced, k.schedule.engine) for k in p.kernels]
    assert [len(k.schedule.site.pairs) for k in merged if k.schedule.site.pairs] == [2]
    # A stored f16: the products R and dWo read it so, and D = sum[d](dO * A) is computed in
    # FlashAttention's kernel beside O (flash.examine: D's rows as a set of O's), not from A
    said = {line.split()[0]: line for line in stored16.said(p)}
    assert said["A"].startswith("A stored as f16: read only by tensor-core products"), said
    (fa,) = [k for k in p.kernels if k.schedule.engine == "attention"]
    assert "D" in {e.name for e in p.graph.graph["equations"] if e.stmt in fa.kernel.equations}
    b, t, m, h = 1, 37, 40, 3
    inputs = dict(X=rng.standard_normal((b, t, m)).astype(np.float16),
                  **{w: (rng.standard_normal((m, h, 16)) * m ** -0.5).astype(np.float16)
                     for w in ("Wq", "Wk", "Wv")},
                  Wo=(rng.standard_normal((h, 16, m)) * (16 * h) ** -0.5).astype(np.float16),
                  dR=rng.standard_normal((b, t, m)).astype(np.float16))
    out = run_plan(p, inputs, dict(b=b, t=t, s=t, m=m, h=h))
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    for name in want:
        assert_close(out[name], want[name], "f16", slack=8.0)
