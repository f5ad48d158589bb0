"""A contraction over three or more axes (compiler/canonical.py `_nested_contraction`): a
(batched) matrix product over its last contracted axis, summed over the others, so it plans
at realistic sizes with the product on the tensor cores; held on the interpreter and the
emulator to a float64 NumPy oracle written here, at small odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler import ir
from napkin.compiler.canonical import canonicalize
from napkin.compiler.plan import plan

EPS = {"f32": 2.0 ** -23, "f16": 2.0 ** -10}
NP = {"f32": np.float32, "f16": np.float16}


def assert_close(out, want, dtype="f32", slack=16.0):
    """|out - want| within `slack` roundings of `dtype`, at the scale of the sum of |terms|."""
    out, want = np.asarray(out, np.float64), np.asarray(want, np.float64)
    assert out.shape == want.shape
    assert np.isfinite(out).all()
    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(out - want)))
    assert err <= slack * EPS[dtype] * scale, (err, scale)


# the contracted axes in another order in B: not one axis (adjacent, in one order, they would
# merge into one, compiler/merge.py, and the product would not nest: MERGED below)
MATMUL = """axis i, a, b, c, j
in A[i a b c]: {dtype}
in B[a c b j]: {dtype}
C[i j] = A * B
out C: f32
"""

MERGED = MATMUL.replace("B[a c b j]", "B[a b c j]")

# a batch axis e, four contracted axes in different orders in the two operands (no two
# adjacent in one order in both: compiler/merge.py)
PERMUTED = """axis e, i, a, b, c, d, j
in A[e a i b c d]: f32
in B[d c b j a e]: f32
C[e i j] = A * B
out C: f32
"""

ATTENTION = """axis q, x, y, z
axis d = 16
in Q[q d]: {dtype}
in K[x y z d]: {dtype}
in V[y x z d]: {dtype}
S[q x y z] = Q * K * 0.25
O[q d] = softmax[x y z](S) * V
out O: f32
"""


def run(text, backend, **inputs):
    return napkin.run(napkin.load(text), backend=backend, **inputs)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_a_matrix_product_over_three_axes_matches_the_oracle(backend, dtype):
    rng = np.random.default_rng(11)
    A = rng.standard_normal((9, 5, 3, 7)).astype(NP[dtype])
    B = rng.standard_normal((5, 7, 3, 17)).astype(NP[dtype])
    (C,) = run(MATMUL.format(dtype=dtype), backend, A=A, B=B)
    want = np.einsum("iabc,acbj->ij", A.astype(np.float64), B.astype(np.float64))
    # f16 operands are multiplied exactly into f32 sums: f32's roundings, at sqrt(105) scale
    assert_close(C, want, "f32", slack=256.0)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
def test_a_contraction_over_four_axes_in_two_layouts_with_a_batch_matches_the_oracle(backend):
    rng = np.random.default_rng(12)
    e, i, a, b, c, d, j = 3, 5, 3, 7, 5, 2, 9
    A = rng.standard_normal((e, a, i, b, c, d)).astype(np.float32)
    B = rng.standard_normal((d, c, b, j, a, e)).astype(np.float32)
    (C,) = run(PERMUTED, backend, A=A, B=B)
    want = np.einsum("eaibcd,dcbjae->eij", A.astype(np.float64), B.astype(np.float64))
    assert_close(C, want, slack=256.0)


@pytest.mark.parametrize("backend", ["interpret", "emulate"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_attention_over_three_key_axes_matches_the_oracle(backend, dtype):
    rng = np.random.default_rng(13)
    Q = rng.standard_normal((19, 16)).astype(NP[dtype])
    K = rng.standard_normal((5, 3, 7, 16)).astype(NP[dtype])
    V = rng.standard_normal((3, 5, 7, 16)).astype(NP[dtype])
    (O,) = run(ATTENTION.format(dtype=dtype), backend, Q=Q, K=K, V=V)
    q, k, v = (t.astype(np.float64) for t in (Q, K, V))
    S = np.einsum("qd,xyzd->qxyz", q, k) * 0.25
    e = np.exp(S - S.max((1, 2, 3), keepdims=True))
    P = e / e.sum((1, 2, 3), keepdims=True)
    # f16: the scores and probabilities may be rounded to 16 bits on the way (tensor cores)
    assert_close(O, np.einsum("qxyz,yxzd->qd", P, v), dtype, slack=16.0)


def _contractions(text):
    g = canonicalize(napkin.load(text).ir)
    ops = [ir.op(g, n) for n in g]
    return ([o.axes for o in ops if isinstance(o, ir.Contract)],
            sorted(o.axes for o in ops if isinstance(o, ir.Reduce) and o.fn == "sum"))


def test_only_contractions_over_three_or_more_axes_are_nested():
    one = "axis i, k, j\nin A[i k]: f16\nin B[k j]: f16\nC[i j] = A * B\nout C: f32\n"
    assert _contractions(one) == ([("k",)], [])
    two = "axis i, a, b, j\nin A[i a b]: f16\nin B[b a j]: f16\nC[i j] = A * B\nout C: f32\n"
    assert _contractions(two) == ([("a", "b")], [])
    # three: the product over A's last contracted axis, summed over the other two
    assert _contractions(MATMUL.format(dtype="f16")) == ([("c",)], [("a", "b")])
    # four: the product over d (A's last), the sum over a b c nested as sum[a](sum[b c])
    assert _contractions(PERMUTED) == ([("d",)], [("a",), ("b", "c")])
    # attention's one key axis keeps its online softmax, paired with its contraction
    assert _contractions("attention")[0] == [("d",), ("x",)]


def test_contracted_axes_adjacent_in_one_order_merge_and_do_not_nest():
    # (compiler/merge.py) a reshape: one matrix product over (a b) or (a b c), nothing summed
    two = "axis i, a, b, j\nin A[i a b]: f16\nin B[a b j]: f16\nC[i j] = A * B\nout C: f32\n"
    assert _contractions(two) == ([("(a*b)",)], [])
    assert _contractions(MERGED.format(dtype="f16")) == ([("(a*b*c)",)], [])
    # two of four adjacent in one order in both: (c d) merges, the rest nests around it
    both = PERMUTED.replace("B[d c b j a e]", "B[c d b j a e]")
    assert _contractions(both) == ([("(c*d)",)], [("a", "b")])


def _total(text, shape, target="h100"):
    p = plan(napkin.load(text), target, shape)
    return p, sum(kp.cost.time for kp in p.kernels)


def test_a_matrix_product_over_three_axes_plans_on_the_tensor_cores_at_64_per_axis():
    # Held whole, the kernel streamed c and kept a and b whole in shared memory: at 64 per axis
    # 13.9 ms predicted on the CUDA cores (f16) and N0603 (2 MiB of smem, f32); at 128, N0603
    # (8 MiB). Nested, model figures on h100: a batched tensor-core product over c and a sum
    # over a and b, 74.6 us at 64 (f32: 160 us, CUDA cores), 1.07 ms at 128.
    mm = dict(i=64, a=64, b=64, c=64, j=64)
    p, total = _total(MATMUL.format(dtype="f16"), mm)
    engines = sorted(kp.schedule.engine for kp in p.kernels)
    assert "tensor-core product" in engines and total < 200e-6, (engines, total)
    assert _total(MATMUL.format(dtype="f32"), mm)[1] < 400e-6
    assert _total(MATMUL.format(dtype="f16"), {a: 128 for a in mm})[1] < 3e-3


@pytest.mark.parametrize("target", ["h100", "a100"])
def test_attention_over_three_key_axes_plans_at_64_per_axis(target):
    # Held whole, at q=256 and x=y=z=64 (d=16): 59 ms predicted on h100, N0603 on a100 (1.5
    # MiB of smem); at 128 per key axis N0603 on both (12 MiB). Nested, model figures:
    # 269 us (h100) and 452 us (a100) at 64, 1.72 ms and 3.20 ms at 128.
    _, total = _total(ATTENTION.format(dtype="f16"), dict(q=256, x=64, y=64, z=64), target)
    assert total < 1e-3, total
    _, total = _total(ATTENTION.format(dtype="f16"), dict(q=256, x=128, y=128, z=128), target)
    assert total < 8e-3, total
