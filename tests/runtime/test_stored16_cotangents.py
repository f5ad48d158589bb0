"""A gradient's cotangents stored in 16 bits where a tensor-core product reads them
(compiler/stored16.py, `cotangents`): the output projection's weight gradient `dWo = dR * A`
of a residual block whose norm also reads dR elementwise, on the tensor cores once dR is
stored in the forward's f16 (before, an f32 cotangent beside the f32 A kept it on the CUDA
cores); the emitted kernels emulated at odd small sizes against the float64 reference of the
gradient; and what keeps f32 (the user's f32 input, the cuda-cores engine, a diagram that is
no gradient, the model's verdict)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import stored16, stored16_stages
from napkin.compiler.cotangents import cotangent_inputs
from napkin.compiler.model import array_name
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION, CHAIN, PRODUCT, SIMT
from napkin.explain import render_text, report
from napkin.pipeline import lowered, run_plan

from .close import assert_close
from .test_stored16 import PROJECTED

BIG = {"t": 2048, "m": 2048, "h": 16}
BLOCK = """axis t, m, h
axis d = 16
in X[t m]: {x}
in Wv[m h d]: f16, Wo[h d m]: f16, g[m]: f16
A[t h d] = X * Wv
R[t m] = X + A * Wo
Y[t m] = R * rsqrt(mean[m](R * R) + 1e-6) * g
out Y: f16
"""


def _grad(x="f16"):
    return napkin.grad(napkin.load(BLOCK.format(x=x)))


def _plan(d, **kw):
    return plan(d, "h100", BIG, fusion=False, **kw)     # one kernel per equation: dR apart


def _stored(p) -> dict:
    return {array_name(p.graph, n): dt for n, dt in stored16.decided(p.graph).items()}


def _kernel(p, name):
    return next(kp for kp in p.kernels if name in [array_name(p.graph, n) for n in kp.kernel.stores])


def test_the_gradient_names_its_cotangents():
    d = _grad()
    assert cotangent_inputs(d) == ("dY",)
    assert cotangent_inputs(napkin.load(BLOCK.format(x="f16"))) == ()
    edited = d.source.text.replace(" (dY).", ".")          # the line without the names
    assert cotangent_inputs(napkin.load(edited)) == ()
    assert _stored(_plan(napkin.load(edited))).get("dR") is None


def test_the_output_projections_weight_gradient_runs_on_tensor_cores():
    p = _plan(_grad())
    assert _stored(p)["dR"] == "f16", stored16.said(p)     # a cotangent dX reads elementwise
    assert _kernel(p, "dWo").schedule.engine == PRODUCT
    assert _kernel(p, "dX").schedule.engine == SIMT        # reads dR rounded, elementwise
    program, text = lowered(p)
    dtypes = {name: dtype for name, dtype, _ in program.buffers}
    assert dtypes["dR"] == "f16" and dtypes["A"] == "f16", dtypes
    # (dWo's kernel, or the launch it shares with dA's product, which reads dR too:
    # compiler/siblings.py)
    i = p.kernels.index(_kernel(p, "dWo"))
    first = next((la.members[0] for la in p.launches if i in la.members), i)
    k = next(kp for kp in program.kernels if kp.kernel == p.kernels[first].kernel.name)
    body = text[text.index(k.name + "("):]
    body = body[:body.index("\n}\n")]
    assert "napkin_mma_m16n8k16_f16(" in body          # dR and A loaded as halves, mma.sync
    halves = {q.array for q in k.params if q.ctype == "const __half* __restrict__"}
    assert {"dR", "A"} <= halves, k.params
    said = render_text(report(p, compare=False))
    assert "dR stored as f16: a cotangent that tensor-core products read" in said, said
    assert "A stored as f16: read only by tensor-core products" in said


def test_what_keeps_the_cotangent_f32(monkeypatch):
    assert _stored(_plan(_grad(), engine="cuda-cores")) == {}
    p = _plan(_grad("f32"))                 # the user's f32 input: its precision, not rounded
    assert "dR" not in _stored(p)
    assert _kernel(p, "dWo").schedule.engine == SIMT
    monkeypatch.setattr(stored16_stages, "_faster", lambda *a: False)   # the model says slower
    p = _plan(_grad())
    assert "dR" not in _stored(p) and _kernel(p, "dWo").schedule.engine == SIMT


def test_cotangents_in_16_bits_match_float64_at_odd_sizes(rng):
    d = _grad()
    p = _plan(d)                       # planned at the big shape, run at odd small sizes
    assert _stored(p)["dR"] == "f16"
    t, m, h = 37, 40, 3
    inputs = dict(X=rng.standard_normal((t, m)).astype(np.float16),
                  Wv=(rng.standard_normal((m, h, 16)) * m ** -0.5).astype(np.float16),
                  Wo=(rng.standard_normal((h, 16, m)) * (16 * h) ** -0.5).astype(np.float16),
                  g=(1 + 0.1 * rng.standard_normal(m)).astype(np.float16),
                  dY=rng.standard_normal((t, m)).astype(np.float16))
    out = run_plan(p, inputs, {"t": t, "m": m, "h": h, "(h*d)": h * 16})   # (local_merge)
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    # dR rounded once to f16 where it is stored (and A, as staged it was anyway), then summed
    # over t in f32: a few f16 roundings at the output's scale, as the outputs' own f16
    for name in ("dWo", "dX", "dWv", "dg"):
        assert_close(out[name], want[name], "f16", slack=2.0)   # (measured: 0.47-0.67)


@pytest.mark.thorough
def test_the_fused_plan_takes_the_cotangent_where_the_model_says_faster():
    p = plan(_grad(), "h100", BIG)
    assert _stored(p)["dR"] == "f16"
    assert _kernel(p, "dWo").schedule.engine == PRODUCT


ATTENTION_TEXT = PROJECTED.format(d=16, x="f16")


@pytest.mark.thorough      # (5 CPU-s of planning at scale)
def test_attention_backward_with_its_projections_on_tensor_cores_matches_float64(rng):
    """The backward of projected attention: Q and K, recomputed by their projections, are
    read by the chains that compute dK = g15 * Q and dQ = g15 * K with the cotangent g15
    computed in the kernel (staged rounded, as P is): stored f16 they make the forward again
    FlashAttention and the backward a chain of products (before, all four on the CUDA cores:
    8.87 -> 2.23 ms at d=128, b=2, t=s=m=2048, h=16, model, h100; 0.43 ms with dV, dK, dQ
    in one chain since Q and K stay 16-bit beside the CUDA cores' readers)."""
    d = napkin.grad(napkin.load(ATTENTION_TEXT))
    p = plan(d, "h100", {"b": 2, "t": 2048, "s": 2048, "m": 2048, "h": 16})
    assert {"Q", "K", "V"} <= set(_stored(p)), stored16.said(p)
    engines = [kp.schedule.engine for kp in p.kernels]
    assert ATTENTION in engines and CHAIN in engines, engines
    b, t, m, h = 1, 37, 40, 3
    inputs = dict(X=rng.standard_normal((b, t, m)).astype(np.float16),
                  **{w: (rng.standard_normal((m, h, 16)) * m ** -0.5).astype(np.float16)
                     for w in ("Wq", "Wk", "Wv")},
                  dA=rng.standard_normal((b, t, h, 16)).astype(np.float16))
    out = run_plan(p, inputs, dict(b=b, t=t, s=t, m=m, h=h))
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    for name in ("dX", "dWq", "dWk", "dWv"):   # (measured: 0.36-0.55 roundings)
        assert_close(out[name], want[name], "f16", slack=2.0)


def test_linear_gelus_cotangent_also_summed_for_the_bias_is_f16(rng):
    """dZ of `gelu(X * W + bias)`, read by dX = dZ * W, dW = dZ * X and dbias = sum[t](dZ):
    the products were on the tensor cores already (dZ staged rounded) but read it in f32;
    stored f16 they read half the bytes (model, h100: 9.45 -> 7.82 ms at this shape)."""
    d = napkin.grad(napkin.load("linear_gelu"))
    shape = {"t": 8192, "i": 4096, "o": 16384}
    p = plan(d, "h100", shape)
    assert _stored(p) == {"g4": "f16"}, stored16.said(p)
    assert [_kernel(p, n).schedule.engine for n in ("dX", "dW")] == [PRODUCT, PRODUCT]
    before = plan(napkin.load(d.source.text.replace(" (dY).", ".")), "h100", shape)
    assert _stored(before) == {}
    assert sum(k.cost.time for k in p.kernels) < 0.9 * sum(k.cost.time for k in before.kernels)
    t, i, o = 37, 40, 72
    inputs = dict(X=rng.standard_normal((t, i)).astype(np.float16),
                  W=(rng.standard_normal((i, o)) * i ** -0.5).astype(np.float16),
                  bias=rng.standard_normal(o).astype(np.float16),
                  dY=rng.standard_normal((t, o)).astype(np.float16))
    out = run_plan(p, inputs, dict(t=t, i=i, o=o))
    want = dict(zip([s.name for s in d.outputs],
                    napkin.run(d, *inputs.values(), backend="reference")))
    for name in ("dX", "dW", "dbias"):
        assert_close(out[name], want[name], "f16", slack=2.0)
