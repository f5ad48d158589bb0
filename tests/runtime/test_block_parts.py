"""The parts of a pre-norm transformer block written as one diagram (docs/tensor-cores.md):
each on the engine it should take at a block's shape (b=2, t=s=2048, m=2048, h=16, d=128,
f=8192: the decision, from the planner), and emulated at odd small sizes against a float64
oracle written here.

- `K[b h s d] = N1[b s m] * Wk`, N1 an f32 intermediate (an RMSNorm of f16 X): the renamed
  reference is rounded to f16 as it is staged, as N1 read at its own positions is
  (tensorcore._rounded); an f32 INPUT renamed stays f32 (CUDA cores).
- causal attention stored as `A[b t h d]` from `Q[b h t d]`: FlashAttention when the head
  size is static; with a dynamic one the softmax kernel's boundary says why not.
- an MLP in one statement with a residual and batch axes, `R + gelu(N2[b t m2] * W1[m2 f]) *
  W2`: two tensor-core kernels (compiler/nested.py); written `gelu(N2 * W1)` it keeps `m`
  (N0705, tests/compiler/test_einsum_lint.py)."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION, PRODUCT, SIMT

from .close import assert_close

BLOCK = {"b": 2, "t": 2048, "s": 2048, "m": 2048, "h": 16, "d": 128, "f": 8192, "m2": 2048}
SMALL = {"b": 2, "t": 37, "m": 40, "h": 2, "d": 16, "f": 72}

NORM_K = """axis b, t, s, m, h, d
in X[b t m]: f16
in g1[m]: f16
in Wk[m h d]: f16
in Wq[m h d]: f16
N1[b t m] = X * rsqrt(mean[m](X * X) + 1e-6) * g1
K[b h s d] = N1[b s m] * Wk
Q[b h t d] = N1 * Wq
out K: f16
out Q: f16
"""     # Q reads N1 as stored: read by K alone, N1 would be computed as N1[b s m] (rename.py)
F32_INPUT_K = """axis b, t, s, m, h, d
in N1[b t m]: f32
in Wk[m h d]: f16
K[b h s d] = N1[b s m] * Wk
out K: f16
"""
ATTENTION_BTHD = """axis b, t, s, h
axis d = {d}
in Q[b h t d]: f16
in K[b h s d]: f16
in V[b h s d]: f16
S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)
A[b t h d] = softmax[s](S) * V
out A: f16
"""
MLP = """axis b, t, m, f, m2
in N2[b t m]: f16
in R[b t m]: f16
in W1[m f]: f16, W2[f m]: f16
Y[b t m] = R + gelu(N2[b t m2] * W1[m2 f]) * W2
out Y: f16
"""


def _sizes(text):
    d = napkin.load(text)
    return {a: v for a, v in BLOCK.items() if a in d.axes}


def _engines(text, **kw):
    p = plan(napkin.load(text), "h100", _sizes(text), **kw)
    return [k.schedule.engine for k in p.kernels], p


def _rmsnorm(x, g):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def _gelu(z):
    return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))


def _f16(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def test_a_renamed_f32_intermediate_feeds_the_tensor_cores_at_the_block_shape():
    engines, _ = _engines(NORM_K)
    assert engines == [SIMT, PRODUCT, PRODUCT], engines    # N1, then K (was SIMT) and Q on mma.sync
    engines, _ = _engines(F32_INPUT_K)                # the user's f32 input is never rounded
    assert engines == [SIMT], engines


def test_a_renamed_f32_intermediate_on_tensor_cores_matches_the_oracle(rng):
    b, t, m, h, d = (SMALL[a] for a in "btmhd")
    X, g1, Wk = _f16(rng, (b, t, m)), _f16(rng, (m,), 0.3) + 1, _f16(rng, (m, h, d), m ** -0.5)
    k = napkin.compile(NORM_K, backend="emulate", engine="tensor-cores", fusion=False, s=t)
    K, _ = k(X=X, g1=g1, Wk=Wk, Wq=Wk)
    N1 = _rmsnorm(X.astype(np.float64), g1.astype(np.float64))
    want = np.einsum("bsm,mhd->bhsd", N1, Wk.astype(np.float64))
    # N1 rounded to f16 as it is staged (one rounding of each product's operand), K stored f16
    assert_close(K, want, "f16", slack=8.0)
    with pytest.raises(napkin.NapkinError, match="N0606"):
        napkin.compile(F32_INPUT_K, backend="emulate", engine="tensor-cores", s=t)(
            N1=N1.astype(np.float32), Wk=Wk)


def test_attention_stored_in_another_layout_is_flash_attention_at_the_block_shape():
    engines, _ = _engines(ATTENTION_BTHD.format(d=128))
    assert engines == [ATTENTION], engines
    dynamic = ATTENTION_BTHD.replace("axis b, t, s, h\naxis d = {d}", "axis b, t, s, h, d")
    engines, p = _engines(dynamic)      # planned at d = 128: specialised (specialise.py)
    assert engines == [ATTENTION] and p.specialised == {"d": 128}, engines
    sizes = {a: v for a, v in _sizes(dynamic).items() if a != "d"}
    p = plan(napkin.load(dynamic), "h100", sizes)       # d defaulted: no caller's size
    engines = [k.schedule.engine for k in p.kernels]
    assert len(engines) == 3 and ATTENTION not in engines
    reasons = " ".join(k.kernel.reason for k in p.kernels)
    assert "not FlashAttention with the kernels around it: the head size `d` must be static" \
        in reasons, reasons


def test_attention_stored_in_another_layout_matches_the_oracle(rng):
    b, t, h, d = 2, 37, 2, 16
    Q, K, V = (_f16(rng, (b, h, t, d)) for _ in range(3))
    text = ATTENTION_BTHD.format(d=d)
    (A,) = napkin.run(text, Q, K, V, backend="emulate", engine="tensor-cores")
    q, k, v = (a.astype(np.float64) for a in (Q, K, V))
    S = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(d)
    S = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    want = np.einsum("bhts,bhsd->bthd", P, v)
    assert_close(A, want, "f16", slack=8.0)        # P rounded to f16 for P V, A stored f16


def test_an_mlp_with_batch_axes_and_a_residual_is_two_tensor_core_kernels():
    engines, _ = _engines(MLP)
    assert engines == [PRODUCT, PRODUCT], engines


def test_an_mlp_with_batch_axes_and_a_residual_matches_the_oracle(rng):
    b, t, m, f = (SMALL[a] for a in "btmf")
    N2, R = _f16(rng, (b, t, m)), _f16(rng, (b, t, m))
    W1, W2 = _f16(rng, (m, f), m ** -0.5), _f16(rng, (f, m), f ** -0.5)
    # unfused (at these sizes the planner fuses the two; at the block's it does not)
    k = napkin.compile(MLP, backend="emulate", engine="tensor-cores", fusion=False)
    (Y,) = k(N2=N2, R=R, W1=W1, W2=W2)
    n2, r, w1, w2 = (a.astype(np.float64) for a in (N2, R, W1, W2))
    want = r + _gelu(n2 @ w1) @ w2
    assert_close(Y, want, "f16", slack=8.0)        # the hidden layer rounded to f16 as staged


# The whole block, written so that each part takes its engine: d static (FlashAttention), the
# MLP's first product renamed (`m2`, else `m` is kept: N0705)
BLOCK_TEXT = """axis b, t, s, m, h, f, m2
axis d = {d}
in X[b t m]: f16
in g1[m]: f16, g2[m]: f16
in Wq[m h d]: f16, Wk[m h d]: f16, Wv[m h d]: f16, Wo[h d m]: f16
in W1[m f]: f16, W2[f m]: f16
N1[b t m] = X * rsqrt(mean[m](X * X) + 1e-6) * g1
Q[b h t d] = N1 * Wq
K[b h s d] = N1[b s m] * Wk
V[b h s d] = N1[b s m] * Wv
S[b h t s] = where(s <= t, Q * K / sqrt(size(d)), -inf)
A[b t h d] = softmax[s](S) * V
R[b t m] = X + A * Wo
N2[b t m] = R * rsqrt(mean[m](R * R) + 1e-6) * g2
Y[b t m] = R + gelu(N2[b t m2] * W1[m2 f]) * W2
out Y: f16
"""


def _block_inputs(rng, b, t, m, h, d, f):
    """X, g1, g2, Wq, Wk, Wv, Wo, W1, W2 of BLOCK_TEXT, f16, scaled to keep values near 1."""
    X = _f16(rng, (b, t, m))
    g1, g2 = _f16(rng, (m,), 0.2) + 1, _f16(rng, (m,), 0.2) + 1
    Wq, Wk, Wv = (_f16(rng, (m, h, d), m ** -0.5) for _ in range(3))
    Wo = _f16(rng, (h, d, m), (h * d) ** -0.5)
    W1, W2 = _f16(rng, (m, f), m ** -0.5), _f16(rng, (f, m), f ** -0.5)
    return X, g1, g2, Wq, Wk, Wv, Wo, W1, W2


def _block_oracle(*arrays):
    """BLOCK_TEXT's Y in float64 (a causal mask over s <= t, s = t)."""
    x, G1, G2, wq, wk, wv, wo, w1, w2 = (a.astype(np.float64) for a in arrays)
    t, d = x.shape[1], wq.shape[2]
    n1 = _rmsnorm(x, G1)
    q, k, v = (np.einsum("btm,mhd->bhtd", n1, w) for w in (wq, wk, wv))
    S = np.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(d)
    S = np.where(np.arange(t)[None, :] <= np.arange(t)[:, None], S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    r = x + np.einsum("bthd,hdm->btm", np.einsum("bhts,bhsd->bthd", P, v), wo)
    return r + _gelu(_rmsnorm(r, G2) @ w1) @ w2


@pytest.mark.thorough
def test_the_whole_block_matches_the_oracle(rng):
    # (one sequence of 19 over odd widths: 4 minutes at SMALL on an idle machine, past the
    # emulator's time limit on a loaded one)
    b, t, m, h, d, f = 1, 19, 24, 2, 16, 40
    X, g1, g2, Wq, Wk, Wv, Wo, W1, W2 = _block_inputs(rng, b, t, m, h, d, f)
    (Y,) = napkin.run(BLOCK_TEXT.format(d=d), X, g1, g2, Wq, Wk, Wv, Wo, W1, W2,
                      backend="emulate", s=t, m2=m)
    want = _block_oracle(X, g1, g2, Wq, Wk, Wv, Wo, W1, W2)
    assert_close(Y, want, "f16", slack=32.0)      # f16 storage of Y; f32 intermediates


@pytest.mark.thorough
@pytest.mark.parametrize("t, m, f", [(37, 40, 72), (131, 48, 72)])
def test_the_whole_block_with_its_projection_merged_matches_the_oracle(rng, t, m, f):
    """R = X + A * Wo one product over (h*d) through reshapes (compiler/local_merge.py), the
    rest of the block with h and d apart: the merged IR planned here (at these odd sizes the
    planner keeps the user's axes), its emitted CUDA emulated: at t=37 the projection on the
    CUDA cores (fused with N2's mean over m: the scalar emitter's reshape), at t=131 a
    tensor-core product (planned unfused: fused, N2 computed under m2 (rename.py) joins
    the MLP on the CUDA cores, with the projection, predicted faster at this size)."""
    from dataclasses import replace
    from napkin.compiler.plan import fuse_kernels, prepare, tile
    from napkin.pipeline import run_plan
    b, h, d = 1, 3, 16
    X, g1, g2, Wq, Wk, Wv, Wo, W1, W2 = _block_inputs(rng, b, t, m, h, d, f)
    sizes = dict(b=b, t=t, s=t, m=m, m2=m, h=h, f=f)
    problem = prepare(napkin.load(BLOCK_TEXT.format(d=d)), "h100", sizes)
    while not problem.graph.graph.get("local_merged"):
        problem = problem.unmerged
    p = tile(fuse_kernels(replace(problem, unmerged=None), fusion=t < 100))
    assert (PRODUCT if t > 100 else SIMT) in [k.schedule.engine for k in p.kernels
                                              if "(h*d)" in k.model.reduced]
    names = ("X", "g1", "g2", "Wq", "Wk", "Wv", "Wo", "W1", "W2")
    Y = run_plan(p, dict(zip(names, (X, g1, g2, Wq, Wk, Wv, Wo, W1, W2))), {**sizes, "d": d})["Y"]
    want = _block_oracle(X, g1, g2, Wq, Wk, Wv, Wo, W1, W2)
    assert_close(Y, want, "f16", slack=32.0)


@pytest.mark.thorough      # (3-4 CPU-s of planning at scale)
def test_the_block_at_its_shape():
    """Q, K, V, the MLP's two products on tensor cores; attention FlashAttention: Q, K and V,
    read only by tensor-core products, are stored f16 as if declared so (compiler/stored16.py;
    FlashAttention takes 16-bit loads), and declared f16 the plan is the same; R = X + A * Wo
    (a contraction over h and d, adjacent in A and Wo but not in Q) one tensor-core product
    over (h*d) read through reshapes (compiler/local_merge.py), so A, read only by it, is
    stored f16 too."""
    from napkin.compiler import stored16
    engines, p = _engines(BLOCK_TEXT.format(d=128))
    want = [SIMT, PRODUCT, PRODUCT, PRODUCT, ATTENTION, PRODUCT, SIMT, PRODUCT, PRODUCT]
    assert engines == want, engines
    assert p.kernels[5].model.reduced == ("(h*d)",)
    names = {line.split()[0] for line in stored16.said(p)}
    assert {"Q", "K", "V", "N1", "N2"} <= names, names
    f16 = BLOCK_TEXT.format(d=128)
    f16 = f16.replace("Q[b h t d] =", "Q[b h t d]: f16 =").replace(
        "K[b h s d] =", "K[b h s d]: f16 =").replace("V[b h s d] =", "V[b h s d]: f16 =")
    engines, declared = _engines(f16)
    assert engines == want, engines
    assert [k.cost.time for k in declared.kernels] == [k.cost.time for k in p.kernels]
