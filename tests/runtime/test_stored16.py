"""Intermediates read only by tensor-core products are stored in 16 bits (compiler/stored16.py):
the decision at a block's shape, the emitted kernels emulated at odd small sizes against a
float64 oracle written here, and the arrays that must keep f32 (also read elementwise, an
output, or computed from the user's f32 inputs, which are never rounded)."""

from __future__ import annotations

import numpy as np

import napkin
from napkin.compiler import stored16
from napkin.explain import render_text, report
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION, PRODUCT, SIMT
from napkin.pipeline import lowered, run_plan
from napkin.runtime.compare import against_reference

from .close import assert_close

BIG = {"b": 2, "t": 2048, "s": 2048, "m": 2048, "h": 16, "f": 8192}
PROJECTED = """axis b, t, s, m, h
axis d = {d}
in X[b t m]: {x}
in Wq[m h d]: f16, Wk[m h d]: f16, Wv[m h d]: f16
Q[b h t d] = X * Wq
K[b h s d] = X[b s m] * Wk
V[b h s d] = X[b s m] * Wv
S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)
A[b t h d] = softmax[s](S) * V
out A: f16
"""
MLP = """axis t, m, f
in X[t m]: f16
in W1[m f]: f16, W2[f m]: f16
H[t f] = gelu(X * W1)
Y[t m] = H * W2
out Y: f16
"""


def _plan(text, **kw):
    d = napkin.load(text)
    return plan(d, "h100", {a: v for a, v in BIG.items() if a in d.axes}, **kw)


def _stored(p) -> dict:
    return {line.split()[0]: line.split()[3].rstrip(":") for line in stored16.said(p)}


def test_projections_feeding_attention_are_stored_f16_and_attention_is_flash():
    p = _plan(PROJECTED.format(d=128, x="f16"))
    assert [k.schedule.engine for k in p.kernels] == [PRODUCT, PRODUCT, PRODUCT, ATTENTION]
    assert _stored(p) == {"Q": "f16", "K": "f16", "V": "f16"}
    program, _ = lowered(p)         # the producers store, and attention loads, half precision
    dtypes = {name: dtype for name, dtype, _ in program.buffers}
    assert [dtypes[n] for n in "QKV"] == ["f16"] * 3, dtypes
    text = render_text(report(p, compare=False))
    assert "Q stored as f16: read only by tensor-core products" in text, text
    # the cuda-cores engine rounds nothing
    assert _stored(_plan(PROJECTED.format(d=128, x="f16"), engine="cuda-cores")) == {}


def test_projections_feeding_attention_match_the_oracle_at_odd_sizes(rng):
    d = 16
    text = PROJECTED.format(d=d, x="f16")
    p = _plan(text)                  # planned at the big shape: projections apart, attention FA2
    assert _stored(p) == {"Q": "f16", "K": "f16", "V": "f16"}
    b, t, m, h = 2, 37, 40, 3
    X = rng.standard_normal((b, t, m)).astype(np.float16)
    Ws = [(rng.standard_normal((m, h, d)) * m ** -0.5).astype(np.float16) for _ in range(3)]
    inputs = dict(X=X, Wq=Ws[0], Wk=Ws[1], Wv=Ws[2])
    out = run_plan(p, inputs, dict(b=b, t=t, s=t, m=m, h=h))
    x = X.astype(np.float64)
    q, k, v = (np.einsum("btm,mhd->bhtd", x, w.astype(np.float64)) for w in Ws)
    S = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(d)
    S = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    want = np.einsum("bhts,bhsd->bthd", P, v)
    # Q, K, V stored f16 (one rounding each, as staged they were anyway), P rounded, A f16
    assert_close(out["A"], want, "f16", slack=8.0)
    verdicts = against_reference(p.diagram, inputs, out, plan=p)   # `napkin run --check`
    assert all(verdicts.values()), verdicts


def test_an_intermediate_also_read_elementwise_or_output_keeps_f32():
    assert _stored(_plan(MLP, fusion=False)) == {"H": "f16"}
    also = MLP.replace("out Y: f16", "Z[t f] = H * 2\nout Y: f16\nout Z: f16")
    p = _plan(also, fusion=False)        # H's kernel apart from both its readers
    assert _stored(p) == {}, stored16.said(p)
    out = MLP.replace("out Y: f16", "out Y: f16\nout H: f32")
    assert _stored(_plan(out, fusion=False)) == {}
    declared = MLP.replace("H[t f] =", "H[t f]: f32 =")        # the user's dtype wins
    assert _stored(_plan(declared, fusion=False)) == {}


def test_an_output_among_attention_operands_keeps_them_f32():
    """Q an f32 output: Q and K, its partner, are stored f32; FlashAttention rounds them to
    V's f16 as it stages them, as a plain product rounds an f32 intermediate beside a 16-bit
    operand (operand_reads.entered; model, h100: 1.52 ms with P V on the tensor cores and the scores
    on the CUDA cores -> 376 us)."""
    text = PROJECTED.format(d=128, x="f16").replace("out A: f16", "out A: f16\nout Q: f32")
    p = _plan(text)
    assert _stored(p) == {"V": "f16"}
    assert [k.schedule.engine for k in p.kernels] == [PRODUCT, PRODUCT, PRODUCT, ATTENTION]


def test_the_users_f32_input_is_never_rounded():
    p = _plan(PROJECTED.format(d=128, x="f32"))
    assert _stored(p) == {}               # Q, K, V computed from f32 X: the user's precision
    assert ATTENTION not in [k.schedule.engine for k in p.kernels]
    inp = "axis t, f, m\nin H[t f]: f32\nin W2[f m]: f16\nY[t m] = H * W2\nout Y: f16\n"
    p = _plan(inp)
    assert _stored(p) == {} and [k.schedule.engine for k in p.kernels] == [SIMT]


# Q read by attention (tensor cores) and by a matrix-vector product that stays on the CUDA cores
SHARED = """axis t, s, m, h
axis d = {d}
in X[t m]: f16
in Wq[m h d]: f16
in K[h s d]: f16, V[h s d]: f16, u[h d]: f16
Q[h t d] = X * Wq
S[h t s] = Q * K
O[t h d] = softmax[s](where(s <= t, S, -inf)) * V
Z[h t] = Q * u
out O: f16, Z: f32
"""


def test_a_cuda_cores_product_beside_a_tensor_core_reader_reads_the_16_bit_copy(rng):
    """Q, read by FlashAttention and by `Z = Q * u` on the CUDA cores, stays f16 for both (the
    kernel off the tensor cores undid it, and attention ran on the CUDA cores: model, h100,
    261 -> 31 us); as attention's backward reads Q and K in its chains and its logsumexp
    kernel. Emulated at odd small sizes: Z from the rounded Q, against float64."""
    shape = {"t": 2048, "s": 2048, "m": 1024, "h": 8}
    d = 16
    p = plan(napkin.load(SHARED.format(d=d)), "h100", shape)
    assert [k.schedule.engine for k in p.kernels] == [PRODUCT, ATTENTION, SIMT]
    assert _stored(p) == {"Q": "f16"}
    t, m, h = 37, 40, 3
    X = rng.standard_normal((t, m)).astype(np.float16)
    Wq = (rng.standard_normal((m, h, d)) * m ** -0.5).astype(np.float16)
    K, V = (rng.standard_normal((h, t, d)).astype(np.float16) for _ in "KV")
    u = rng.standard_normal((h, d)).astype(np.float16)
    inputs = dict(X=X, Wq=Wq, K=K, V=V, u=u)
    out = run_plan(p, inputs, dict(t=t, s=t, m=m, h=h))
    q = np.einsum("tm,mhd->htd", X.astype(np.float64), Wq.astype(np.float64))
    S = np.einsum("htd,hsd->hts", q, K.astype(np.float64))
    S = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    assert_close(out["O"], np.einsum("hts,hsd->thd", P, V.astype(np.float64)), "f16", 8.0)
    assert_close(out["Z"], np.einsum("htd,hd->ht", q, u.astype(np.float64)), "f16", 8.0)
    verdicts = against_reference(p.diagram, inputs, out, plan=p)
    assert all(verdicts.values()), verdicts
