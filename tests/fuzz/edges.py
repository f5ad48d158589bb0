"""Numeric edge cases of softmax and attention, in f32, f16 and bf16.

Each row of the inputs is one scenario: fully masked, one unmasked element, logits of
+-1e4, NaN under the mask, +-inf inputs, rows of length 1. Every backend (reference,
interpreter, emulator; the planner's plan and a streamed, split plan) must agree with
the float64 reference (NaN and inf in the same places) and give what the language page
specifies: fully masked rows 0, their logsumexp -inf, NaN never leaking from masked
positions, a row holding +inf NaN.
"""

from __future__ import annotations

import re

import numpy as np

import napkin
from napkin.compiler.cost import Choice
from napkin.compiler.plan import plan as make_plan
from napkin.compiler.variants import with_choices
from napkin.runtime import bound, compare, dtypes
from napkin.pipeline import run_plan
from napkin.runtime.interpret import interpret

SOFTMAX = """
axis r, c
in X[r c]: DT
in M[r c]: DT
S[r c] = where(M > 0, X, -inf)
P[r c] = softmax[c](S)
L[r] = logsumexp[c](S)
out P: DT, L: f32
"""

ATTENTION = """
axis b, q, x
axis d = 8
in Q[b q d]: DT
in K[b x d]: DT
in V[b x d]: DT
in M[b q x]: DT
S[b q x] = where(M > 0, Q * K, -inf)
P[b q x] = softmax[x](S)
O[b q d] = P * V
L[b q] = logsumexp[x](S)
out O: DT, L: f32
"""

# attention as the tensor cores take it (head size a multiple of 16, no second reduction)
FLASH = """
axis b, q, x
axis d = 16
in Q[b q d]: DT
in K[b x d]: DT
in V[b x d]: DT
in M[b q x]: DT
S[b q x] = where(M > 0, Q * K, -inf)
P[b q x] = softmax[x](S)
O[b q d] = P * V
out O: DT
"""

# a causal mask with an offset: the first rows see no key at all (chunks skipped by index)
CAUSAL = """
axis b, q, x
axis d = 8
in Q[b q d]: DT
in K[b x d]: DT
in V[b x d]: DT
S[b q x] = where(x + 6 <= q, Q * K, -inf)
P[b q x] = softmax[x](S)
O[b q d] = P * V
out O: DT
"""

SOFTMAX_ROWS = ("fully masked", "one unmasked", "logits +1e4", "logits -1e4 and +1e4",
                "all logits 1e4", "NaN under the mask", "+inf unmasked", "-inf unmasked",
                "all -inf", "normal")


def diagram(text: str, dtype: str):
    return napkin.load(re.sub(r"\bDT\b", dtype, text))


def softmax_inputs(cols: int, dtype: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    rows = len(SOFTMAX_ROWS)
    X = rng.uniform(-3, 3, (rows, cols))
    M = np.ones((rows, cols))
    last = cols - 1
    M[0] = 0
    M[1] = 0
    M[1, last] = 1                       # the one unmasked element is in the last chunk
    X[2, ::2] = 1e4
    X[3, ::2], X[3, 1::2] = -1e4, 1e4
    X[4] = 1e4
    M[5, ::3] = 0
    X[5, ::3] = np.nan
    X[6, last // 2] = np.inf
    X[7, ::2] = -np.inf
    X[8] = -np.inf
    if cols == 1:                         # rows of one element: keep each scenario meaningful
        M[1, 0] = 1
        M[5, 0] = 0
    np_dt = dtypes.numpy_dtype(dtype)
    return {"X": X.astype(np_dt), "M": M.astype(np_dt)}


def attention_inputs(nq: int, nx: int, dtype: str, seed: int = 0, head: int = 8) -> dict:
    rng = np.random.default_rng(seed)
    Q = rng.uniform(-1, 1, (1, nq, head))
    K = rng.uniform(-1, 1, (1, nx, head))
    V = rng.uniform(-1, 1, (1, nx, head))
    M = np.ones((1, nq, nx))
    M[0, 0] = 0                                       # fully masked
    M[0, 1] = 0
    M[0, 1, nx - 1] = 1                               # one unmasked key
    Q[0, 2] = 1e4 / head                              # logits +-1e4
    K[0, :, :] = np.where(K >= 0, 1.0, -1.0) if nx > 0 else K
    K[0, 0, 0] = 1.0                                  # so a +inf query meets a +inf logit
    pad = list(range(1, nx, 5))                       # padded keys: NaN, masked for every query
    K[0, pad] = np.nan
    M[0, :, pad] = 0
    if nq > 3:
        Q[0, 3] = 0.0
        Q[0, 3, 0] = np.inf                           # +inf input: the row is NaN
    np_dt = dtypes.numpy_dtype(dtype)
    return {"Q": Q.astype(np_dt), "K": K.astype(np_dt), "V": V.astype(np_dt),
            "M": M.astype(np_dt)}


def causal_inputs(nq: int, nx: int, dtype: str, seed: int = 0, head: int = 8) -> dict:
    rng = np.random.default_rng(seed)
    np_dt = dtypes.numpy_dtype(dtype)
    return {n: rng.uniform(-1, 1, s).astype(np_dt)
            for n, s in (("Q", (1, nq, head)), ("K", (1, nx, head)), ("V", (1, nx, head)))}


def plans(d, shape: dict, streamed: Choice | None, tensor_cores: bool = False):
    p = make_plan(d, "h100", shape)
    out = [("planned", p)]
    if streamed is not None and len(p.kernels) == 1:
        out.append(("streamed and split", with_choices(p, [streamed])))
    if tensor_cores:   # planned at large sizes (FlashAttention-2), run at these
        big = make_plan(d, "h100", {a: 4096 if a in ("q", "x") else 64 for a in shape})
        assert all(kp.choice.warps for kp in big.kernels), [kp.choice for kp in big.kernels]
        out.append(("tensor cores", big))
    return out


def run_all(d, inputs: dict, shape: dict, streamed: Choice | None = None,
            emulate: bool = True, tensor_cores: bool = False) -> dict:
    """Backend name -> outputs (float64), every one checked against the reference."""
    ref, low, _ = compare.references(d, inputs, bounded=False)
    results = {"reference": ref}
    sizes = {**shape, **{a: s for a, s in d.axes.items() if s is not None}}
    for label, p in plans(d, shape, streamed, tensor_cores):
        # its order-aware bound, capped by its own longest sequential accumulation
        order = bound.evaluate(d, inputs, bound.longest_accumulation(p))
        runs = {f"interpret ({label})": lambda p=p: interpret(p, inputs)}
        if emulate:
            runs[f"emulate ({label})"] = lambda p=p: run_plan(p, inputs, sizes)
        for name, fn in runs.items():
            got = fn()
            for s in d.outputs:
                verdict = compare.check(got[s.name], ref[s.name], low[s.name], s.dtype, s.name,
                                        order[s.name])
                assert verdict.ok, f"{name}: {verdict.message}"
            results[name] = {k: np.asarray(v, dtype=np.float64) for k, v in got.items()}
    return results


def softmax_expectations(out: dict, cols: int) -> None:
    """What the language page says about each softmax scenario row."""
    P, L = out["P"], out["L"]
    assert np.all(P[0] == 0) and L[0] == -np.inf                 # fully masked
    assert P[1, cols - 1] == 1 and np.all(P[1, :cols - 1] == 0)  # one unmasked element
    for r in (2, 3, 4, 9) + ((7,) if cols > 1 else ()):
        assert np.all(np.isfinite(P[r])) and abs(P[r].sum() - 1) < 2e-2, r
        assert np.isfinite(L[r]), r
    assert not np.isnan(P[5]).any()                              # NaN under the mask
    assert np.isfinite(L[5]) if cols > 1 else L[5] == -np.inf
    assert np.isnan(P[6]).all() and L[6] == np.inf               # +inf unmasked
    assert np.all(P[8] == 0) and L[8] == -np.inf                 # all -inf
    if cols > 1:
        assert np.all(P[7, ::2] == 0)                            # -inf: probability 0
        assert abs(L[4] - (1e4 + np.log(cols))) < 1e4 * 1e-2


def attention_expectations(out: dict, inputs: dict, nq: int, nx: int) -> None:
    O, L = out["O"], out.get("L")
    V = inputs["V"].astype(np.float64)
    assert np.all(O[0, 0] == 0) and (L is None or L[0, 0] == -np.inf)   # fully masked
    if nx - 1 not in range(1, nx, 5):                            # the one key is not padding
        assert np.allclose(O[0, 1], V[0, nx - 1], atol=1e-2)
    assert np.all(np.isfinite(O[0, 2])) and (L is None or np.isfinite(L[0, 2]))  # logits +-1e4
    rows = [r for r in range(nq) if r != 3 or nq <= 3]
    assert not np.isnan(O[0, rows]).any()                        # padded NaN keys never leak
    if nq > 3:
        assert np.isnan(O[0, 3]).all()                           # +inf in the row: NaN
