"""Attention whose K or V is read renamed (self-attention's `K[h s d]` of a computed
`K[h t d]`) stays off FlashAttention (its tiles are copied as stored): the reason names the
array and the rewrite that stores it under the key axis, which then plans FlashAttention."""

from __future__ import annotations

import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import NapkinError

RENAMED = """\
axis t, m, h, s
axis d = 64
in X[t m]: bf16
in Wq[m h d]: bf16
in Wk[m h d]: bf16
in V[h s d]: bf16
Q[h t d] = X * Wq
K[h t d] = X * Wk
S[h t s] = Q * K[h s d]
O[t h d] = softmax[s](where(s <= t, S, -inf)) * V
out O: bf16
"""
STORED = RENAMED.replace("K[h t d] = X * Wk", "K[h s d] = X[s m] * Wk").replace(
    "Q * K[h s d]", "Q * K")
SHAPE = {"t": 2048, "s": 2048, "m": 1024, "h": 8}


def test_a_renamed_key_is_the_reason_with_its_rewrite():
    with pytest.raises(NapkinError) as exc:
        plan(napkin.load(RENAMED), "h100", SHAPE, engine="tensor-cores")
    diag = exc.value.diagnostics[0]
    assert diag.code == "N0606" and "`K` is read renamed as `K[h s d]`" in diag.message, diag
    assert "`K[h s d] = ...`" in diag.message
    p = plan(napkin.load(STORED), "h100", SHAPE, engine="tensor-cores")
    from napkin.compiler.flash import examine
    sites = [examine(p.graph, kp.kernel, kp.model, p.target, p.sizes) for kp in p.kernels]
    assert any(s is not None and not isinstance(s, str) for s in sites), sites
