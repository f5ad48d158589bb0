"""Gathers (computed positions, docs/language.md): embedding lookups, rotate-half and a page
table, on the reference, the interpreter and the emitted CUDA (one emulator build each),
against NumPy; out-of-range positions are errors on the reference and the interpreter and are
clamped by the emitted CUDA; the diagnostics for positions that are not integers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import NapkinError

ROPE = """\
axis t, v, m
in E[v m]: f32               # the embedding table
in tok[t]: i32               # token ids
in C[t m]: f32, S[t m]: f32  # cos and sin of the rotary angles
X[t m] = E[tok[t] m]
R[t m] = X * C + where(m < size(m) // 2, -1, 1) * X[t mod(m + size(m) // 2, size(m))] * S
out R: f32
"""

PAGED = """\
# Decoding one query per sequence over a paged KV cache: key x of sequence b lives in
# page pages[b x // P], row mod(x, P) (floor gives an integer; `x // size(P)` in parentheses is
# the same position).
axis b, h, x, d, n, p
axis P = 4
in Q[b h d]: f32
in Kc[n p h d]: f32, Vc[n p h d]: f32
in pages[b p]: i32
S[b h x] = Kc[pages[b floor(x / size(P))] mod(x, size(P)) h d] * Q / sqrt(size(d))
O[b h d] = softmax[x](S) * Vc[pages[b (x // size(P))] mod(x, size(P)) h d]
out O: f32
"""


def rope_inputs(rng, t=37, v=53, m=16):
    angles = rng.uniform(0, 2 * math.pi, (t, m)).astype(np.float32)
    return {"E": rng.standard_normal((v, m)).astype(np.float32),
            "tok": rng.integers(0, v, t).astype(np.int32),
            "C": np.cos(angles), "S": np.sin(angles)}


def rope_numpy(a):
    x = a["E"].astype(np.float64)[a["tok"]]
    half = x.shape[1] // 2
    rotated = np.concatenate([-x[:, half:], x[:, :half]], axis=1)
    return x * a["C"] + rotated * a["S"]


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_embedding_and_rotate_half(backend, rng):
    a = rope_inputs(rng)
    (R,) = napkin.run(ROPE, **a, backend=backend)
    np.testing.assert_allclose(R, rope_numpy(a), rtol=1e-5, atol=1e-6)


def paged_inputs(rng, b=3, h=2, x=13, d=8, pages_total=17, P=4):
    per_seq = -(-x // P)
    table = rng.permutation(pages_total)[:b * per_seq].reshape(b, per_seq).astype(np.int32)
    return {"Q": rng.standard_normal((b, h, d)).astype(np.float32),
            "Kc": rng.standard_normal((pages_total, P, h, d)).astype(np.float32),
            "Vc": rng.standard_normal((pages_total, P, h, d)).astype(np.float32),
            "pages": table}, x


def paged_numpy(a, x):
    P = a["Kc"].shape[1]
    pos = np.arange(x)
    page = a["pages"][:, pos // P]                       # [b x]
    K = a["Kc"].astype(np.float64)[page, pos % P]         # [b x h d]
    V = a["Vc"].astype(np.float64)[page, pos % P]
    s = np.einsum("bxhd,bhd->bhx", K, a["Q"].astype(np.float64)) / math.sqrt(K.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhx,bxhd->bhd", p, V)


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_paged_kv_decode(backend, rng):
    """x is not the size of any input: it is given (-D x=13), and the page table's p is
    only the number of pages each sequence holds."""
    a, x = paged_inputs(rng)
    d = napkin.load(PAGED, x=x)
    (O,) = napkin.run(d, **a, backend=backend)
    np.testing.assert_allclose(O, paged_numpy(a, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [53, -1])
@pytest.mark.parametrize("backend", ["reference", "interpret"])
def test_an_out_of_range_position_is_an_error_on_the_cpu_backends(backend, bad, rng):
    a = rope_inputs(rng)
    a["tok"][7] = bad
    with pytest.raises(NapkinError) as exc:
        napkin.run(ROPE, **a, backend=backend)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0407" and f"is {bad} at t=7" in diag.message and "size 53" in diag.message
    assert diag.span.line == 5


def test_the_emitted_cuda_clamps_an_out_of_range_position(rng):
    a = rope_inputs(rng)
    a["tok"][7], a["tok"][9] = 53, -4
    (R,) = napkin.run(ROPE, **a, backend="emulate")
    clamped = dict(a, tok=np.clip(a["tok"], 0, 52))
    np.testing.assert_allclose(R, rope_numpy(clamped), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("position, culprit", [
    ("(x / 2)", "x / 2"),          # real division
    ("F[x]", "F[x]"),              # a gather through a float array
    ("(x < 2)", "x < 2"),          # a boolean
])
def test_a_position_must_be_an_integer(position, culprit):
    text = f"axis x, v\nin E[v]: f32\nin F[x]: f32\nY[x] = E[{position}] + F\nout Y: f32"
    with pytest.raises(NapkinError) as exc:
        napkin.load(text)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0406" and "dimension 0 of `E`" in diag.message and "int(" in diag.help
    line = text.splitlines()[3]
    assert line[diag.span.col - 1:].startswith(culprit)


def test_an_axis_before_parentheses_is_two_positions(rng):
    X = rng.standard_normal((3, 5)).astype(np.float32)
    (Y,) = napkin.run("axis t, m\nin X[t m]: f32\nY[t m] = X[t (mod(m + 1, size(m)))]\nout Y: f32", X)
    np.testing.assert_array_equal(Y, np.roll(X, -1, axis=1))


def test_an_indexed_array_before_parentheses_is_two_positions(rng):
    """`I[t] (m // 2)` parses as a call of `I[t]`; it is the gather `I[t]`, then `m // 2` (the
    random-diagram fuzzer wrote it, and N0302 said one position where there are two)."""
    X = rng.standard_normal((7, 3)).astype(np.float32)
    idx = rng.integers(0, 7, 4).astype(np.int32)
    text = ("axis t, m, r\naxis k = 5\nin X[t m]: f32\nin I[r]: i32\n"
            "Y[r k] = X[I[r] (k // 2)]\nout Y: f32")
    (Y,) = napkin.run(text, X, idx)
    np.testing.assert_array_equal(Y, X[idx][:, np.arange(5) // 2])
    with pytest.raises(NapkinError) as exc:
        napkin.load(text.replace("(k // 2)", "(k // 2, 1)"))
    assert exc.value.code == "N0208" and "indexed array, not a function" in str(exc.value)


def test_reductions_take_axis_names_only():
    with pytest.raises(NapkinError) as exc:
        napkin.load("axis t, m\nin X[t m]: f32\nY[t] = sum[mod(m, 2)](X)\nout Y: f32")
    assert exc.value.code == "N0208"


def test_the_language_page_shows_this_rope():
    from pathlib import Path
    page = (Path(__file__).parents[2] / "docs" / "language.md").read_text()
    assert f"```\n{ROPE}```" in page


GATHERED_REDUCTION = """\
axis i = 17, j = 33, l = 2
in I0[i j]: i32
E2[l j] = sum[i](where(i >= j, i, 0)) + l
E4[i j] = E2[mod(I0, size(l)) j]
out E4: f32
"""


@pytest.mark.parametrize("chunk", [None, 8, 16, 17])
def test_a_gathered_reduction_streamed_in_the_same_kernel(chunk):
    """E2, a sum streamed over i, read at a computed position by E4, whose own axis i the
    block tiles: the interpreter took E2 over all of j, which the block had not streamed
    (its sum over i then covered one chunk: 16 short at i=17, chunks of 16). Found by
    benchmarks/fuzz.py."""
    rng = np.random.default_rng(3)
    I0 = rng.integers(0, 64, (17, 33)).astype(np.int32)
    i, j = np.arange(17)[:, None], np.arange(33)[None, :]
    E2 = np.where(i >= j, i, 0).sum(0)[None, :] + np.arange(2)[:, None]      # [l j]
    want = E2[I0 % 2, j]
    for backend in ("reference", "interpret"):
        (E4,) = napkin.run(GATHERED_REDUCTION, I0, backend=backend,
                           stream={"i": chunk} if chunk else None)
        np.testing.assert_array_equal(E4, want)


EMBED = "axis t, v, m\nin E[v m]: f32\nin tok[t]: i32\nX[t m] = E[tok[t] m]\nout X: f32\n"


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate", "cuda"])
def test_a_gather_along_an_empty_axis_is_an_error_before_launching(backend, rng):
    """A table of no rows has no position inside it: the reference said N0407, and the emitted
    CUDA, whose clamp to the nearest row has no row, read before the table's start (a SEGV
    under the emulator's AddressSanitizer, garbage without it). Every backend now refuses it
    before anything runs (the GPU's path on a stand-in launcher: nothing is launched); a
    gather with no point to read is still empty."""
    from napkin.kernel import Kernel
    from .fake_gpu import DeviceArray, FakeLauncher
    E, tok = np.zeros((0, 16), np.float32), rng.integers(0, 5, 3).astype(np.int32)
    if backend == "cuda":
        launcher = FakeLauncher()
        kernel = Kernel(napkin.load(EMBED), backend="cuda", launcher=launcher)
        E, tok = DeviceArray((0, 16), "<f4"), DeviceArray((3,), "<i4")
    else:
        kernel = napkin.compile(EMBED, backend=backend, target="h100")
    with pytest.raises(NapkinError) as exc:
        kernel(E, tok)
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0407" and "`E`" in diag.message and "`v`, of size 0" in diag.message
    assert diag.span.line == 4 and diag.help
    if backend == "cuda":
        assert launcher.launches == []
    else:
        (X,) = kernel(E, np.zeros(0, np.int32))
        assert X.shape == (0, 16)
