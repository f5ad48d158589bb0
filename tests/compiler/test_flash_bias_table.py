"""A bias gathered from a learned table into the scores (T5's relative-position buckets,
`B[(minimum(q - x, 32)) h]`) is a term of FlashAttention's scores, read per score by the
scalar emitter; it sent the scores through global memory before (3 kernels, S and P stored:
379 us against 144 us fused, model, h100, h=16 q=x=2048 d=16; 140 us since the table is
charged its unique bytes, compiler/gather_reads.py). Checked against a float64
NumPy oracle on the interpreter and (thorough tier) the emulator."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.runtime.dtypes import numpy_dtype

T5 = """\
axis h, q, x
axis d = 32, r = 33
in Q[h q d]: bf16
in K[h x d]: bf16
in V[h x d]: bf16
in B[r h]: f32
S[h q x] = where(x <= q, Q * K + B[(minimum(q - x, 32)) h], -inf)
O[h q d] = softmax[x](S) * V
out O: bf16
"""


def _oracle(Q, K, V, B):
    Q, K, V, B = (a.astype(np.float64) for a in (Q, K, V, B))
    q, x = np.arange(Q.shape[1])[:, None], np.arange(K.shape[1])[None, :]
    S = np.einsum("hqd,hxd->hqx", Q, K) + B[np.minimum(q - x, 32) * (q >= x), :].transpose(2, 0, 1)
    S = np.where(x <= q, S, -np.inf)
    P = np.exp(S - S.max(-1, keepdims=True))
    return np.einsum("hqx,hxd->hqd", P / P.sum(-1, keepdims=True), V)


def test_a_gathered_bias_table_plans_one_flashattention_kernel():
    p = plan(napkin.load(T5), "h100", {"h": 16, "q": 2048, "x": 2048})
    assert len(p.kernels) == 1 and p.kernels[0].schedule.engine == "attention"


@pytest.mark.parametrize("backend", ["interpret", pytest.param("emulate", marks=pytest.mark.thorough)])
def test_a_gathered_bias_table_matches_float64(backend):
    rng = np.random.default_rng(5)
    h, q, d = 2, 35, 32          # q past the 32 buckets: the last one is clipped
    Q, K, V = (rng.uniform(-1, 1, (h, q, d)).astype(numpy_dtype("bf16")) for _ in range(3))
    B = rng.uniform(-2, 2, (33, h)).astype(np.float32)
    (O,) = napkin.run(T5, Q, K, V, B, backend=backend)
    np.testing.assert_allclose(O.astype(np.float64), _oracle(Q, K, V, B), atol=3e-2)
