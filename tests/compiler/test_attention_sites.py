"""fuse._attention_sites: the fusion start that holds each attention whole (its scores'
statement, their logsumexps, the softmax and the product reading the probabilities), so that
greedy pairwise fusion cannot first fuse the scores with their operands' projection on the
CUDA cores (tests/runtime/test_flash_lse.py's thorough full_proj case plans the whole
gradient; these check the start itself, on the graph fusion sees, in milliseconds)."""

from __future__ import annotations

import pytest

import napkin
from napkin.compiler import fuse, ir
from napkin.compiler.plan import prepare

HEAD = """axis t, s, m
axis h = 2
axis d = 16
in X[t m]: f16
in Wq[m h d]: f16
in K[h s d]: f16
in V[h s d]: f16
Q[h t d] = X * Wq
S[h t s] = Q * K
L[h t] = logsumexp[s](S)
"""
NAMED = HEAD + "P[h t s] = softmax[s](S)\nO[h t d] = P * V\nout O: f16, L: f32\n"
INLINE = HEAD + "O[h t d] = softmax[s](S) * V\nout O: f16, L: f32\n"


def _start(text: str):
    g = prepare(napkin.load(text), "h100", {"t": 37, "s": 37, "m": 29}).graph
    stmts = fuse._statements(g)
    kinds = {s: {type(ir.op(g, n)).__name__ for n in nodes} for s, nodes in stmts.items()}
    return fuse._attention_sites(g, stmts, None), kinds


def _of(kinds, *wanted):
    return {s for s, k in kinds.items() if set(wanted) <= k}


@pytest.mark.parametrize("text", [NAMED, INLINE], ids=["named", "inline"])
def test_the_attention_is_one_cluster_and_the_projection_apart(text):
    # the probabilities read by the product through their name (`P * V` reads P's Assign,
    # not the softmax) as well as inline
    sites, kinds = _start(text)
    assert sites is not None
    scores = next(s for s in _of(kinds, "Contract") if any(
        s in c and _of(kinds, "Softmax") <= c for c in sites))
    whole = next(c for c in sites if scores in c)
    assert _of(kinds, "Softmax") | _of(kinds, "Reduce") <= whole      # softmax, logsumexp
    assert len(whole & _of(kinds, "Contract")) == 2                  # scores and P * V
    projection = next(iter(_of(kinds, "Contract") - whole))          # Q = X * Wq stays apart
    assert frozenset([projection]) in sites


def test_no_start_without_a_product_of_the_probabilities():
    sites, _ = _start(HEAD + "P[h t s] = softmax[s](S)\nout P: f16, L: f32\n")
    assert sites is None
