"""Chains of products on tensor cores (compiler/chain.py, codegen/chain.py), run by the emulator.

FlashAttention's backward halves (dQ with the queries' rows, dK and dV with the keys'
rows) and an MLP streamed over its hidden axis are planned at large sizes, where the
planner puts them on the tensor cores as one chain kernel each, then run at odd sizes (a
partial block of rows, a partial last chunk) against FlashAttention-2's backward formulas
in float64 and the float64 reference under testing.md's tolerance rule.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.explain import render_text, report
from napkin.compiler import chain, schedule
from napkin.compiler.fuse import _statements
from napkin.compiler.kernels import fused_kernel
from napkin.compiler.model import array_name, kernel_model
from napkin.compiler.plan import plan, prepare
from napkin.pipeline import run_plan
from napkin.runtime import compare

from ..compiler.test_grad import _attention_reference
from ..compiler.test_specialise import DYNAMIC

BIG = {"b": 2, "h": 4, "q": 2048, "x": 2048}


def chains(p) -> list:
    return [kp for kp in p.kernels if kp.schedule.engine == schedule.CHAIN]


def attention_inputs(shape, d, causal, seed):
    """Q, K, V, dO and the forward's saved statistics (float64 formulas, then rounded)."""
    rng = np.random.default_rng(seed)
    b, h, q, x = (shape[a] for a in "bhqx")
    Q, dO = (rng.standard_normal((b, h, q, d)).astype(np.float16) for _ in range(2))
    K, V = (rng.standard_normal((b, h, x, d)).astype(np.float16) for _ in range(2))
    O, dQ, dK, dV, lse = _attention_reference(*(a.astype(np.float64) for a in (Q, K, V, dO)), causal)
    inputs = {"Q": Q, "K": K, "V": V, "dO": dO, "P_lse": lse.astype(np.float32),
              "O_saved": O.astype(np.float16)}
    return inputs, {"dQ": dQ, "dK": dK, "dV": dV}


@pytest.mark.parametrize("name, wrt, shape", [
    ("attention", "Q", {"b": 1, "h": 2, "q": 77, "x": 130}),
    ("attention", "K,V", {"b": 1, "h": 1, "q": 45, "x": 19}),
    # blocks of 128 rows: chunks above the diagonal are skipped, and one is partly masked
    ("causal_attention", "Q", {"b": 1, "h": 1, "q": 150, "x": 150}),
    ("causal_attention", "K,V", {"b": 1, "h": 1, "q": 150, "x": 150}),
])
def test_attention_backward_halves_are_chains_that_match(name, wrt, shape):
    d = napkin.grad(name, wrt=tuple(wrt.split(",")), saved=True, d=64)
    p = plan(d, "h100", BIG)
    (kp,) = chains(p)                  # one kernel: scores, probabilities, dS, the products
    assert {"S", "P", "dP", "dS"} <= {array_name(p.graph, n) for n in kp.kernel.nodes}
    stored = {array_name(p.graph, n) for k in p.kernels for n in k.kernel.stores}
    assert not stored & {"S", "P", "dP", "dS"}, stored   # nothing N x N in global memory
    causal = name.startswith("causal")
    assert ("if (!(!(((long long)" in render(lower(p))) == causal   # masked chunks skipped
    inputs, want = attention_inputs(shape, 64, causal, seed=sum(shape.values()))
    assert_gradient_matches(d, p, shape, inputs, want)


def assert_gradient_matches(d, p, shape, inputs, want):
    """The plan run (emulated) at `shape` on `inputs`: within the tolerance rule of the float64
    reference, and within 2% of the largest of each float64 gradient of attention_inputs."""
    out = run_plan(p, inputs, shape, timeout_s=240)
    for v in compare.against_reference(d, inputs, out).values():
        assert v.ok, v.message
    for k, got in out.items():
        np.testing.assert_allclose(np.asarray(got, np.float64), want[k], rtol=0,
                                   atol=2e-2 * np.abs(want[k]).max())


def test_the_key_half_stages_the_query_statistics_per_chunk():
    """dK, dV stream the queries: the saved logsumexp and D (4-byte values over the queries)
    are copied per chunk beside Q and dO (one cp.async.4 a thread, no copy loop) and read from
    shared memory, not from global memory at every element of every chunk; the query half
    holds them per row in registers (issue 14)."""
    d = napkin.grad("attention", wrt=("K", "V"), saved=True, d=64)
    p = plan(d, "h100", BIG)
    (kp,) = chains(p)
    source = render(lower(p))
    copies = re.findall(r"napkin_cp_async_4\([^;]*?, (p\d+) \+ \([^;]*?\? 4 : 0\)", source)
    # lse and D: the first chunks (one fewer than the stages), then two prefetches (the
    # loop's and the peeled last chunk's)
    stages, chunk = kp.schedule.stages, kp.choice.stream[1]
    assert len(copies) == 2 * (stages + 1), copies
    assert source.count(f"if (tid < {chunk}) {{") == 2 * (stages + 1)    # a thread a query
    # every other read of their parameters is none: only the declaration and the copies
    for param in set(copies):
        assert len(re.findall(rf"\b{param}\b", source)) == 1 + copies.count(param)


MLP = """axis t, f, d = 32, e = 16
in X[t d]: f16
in W1[d f]: f16
in W2[f e]: f16
H[t f] = X * W1
Y[t e] = tanh(H) * W2
out Y: f32"""


def test_a_two_layer_product_streamed_over_its_hidden_axis():
    d = napkin.load(MLP)
    p = plan(d, "h100", {"t": 4096, "f": 4096})
    (kp,) = chains(p)
    site = kp.schedule.site
    assert (site.row, site.red) == ("t", "f")
    shape = {"t": 37, "f": 83}
    inputs = random_inputs(d, shape, 3)
    out = run_plan(p, inputs, shape, timeout_s=240)
    for v in compare.against_reference(d, inputs, out).values():
        assert v.ok, v.message


def test_the_rows_skip_an_axis_a_streamed_operand_has():
    """`W2[b f o]` varies along b: at t = 1 the rows would run along b (the longer axis) and
    the chain was refused (N0606: 'a streamed product is not T[.. row red] C[.. red e]');
    they run along t and b is a batch axis, one position per block."""
    d = napkin.load("axis b, t, f\naxis m = 32\naxis o = 16\nin X[b t m]: f16\n"
                    "in W1[m f]: f16\nin W2[b f o]: f16\nH[b t f] = gelu(X * W1)\n"
                    "Y[b t o] = H * W2\nout Y: f16")
    shape = {"b": 8, "t": 1, "f": 40}
    p = plan(d, "h100", shape, engine="tensor-cores")
    (kp,) = chains(p)
    assert kp.schedule.site.row == "t" and "b" in kp.schedule.site.batch
    inputs = random_inputs(d, shape, 3)
    out = run_plan(p, inputs, shape, timeout_s=240)
    for v in compare.against_reference(d, inputs, out, plan=p).values():
        assert v.ok, v.message


def test_seeded_chain_bug_gives_wrong_values():
    # the two 8-wide C tiles of the chunk value swapped in the packed A fragment
    d = napkin.load(MLP)
    p = plan(d, "h100", {"t": 4096, "f": 4096})
    assert chains(p)
    shape = {"t": 21, "f": 40}
    inputs = random_inputs(d, shape, 5)

    def edit(src: str) -> str:
        assert "napkin_pack_half2(tv[0][0], tv[0][1])" in src
        return src.replace("napkin_pack_half2(tv[0][0], tv[0][1])",
                           "napkin_pack_half2(tv[1][0], tv[1][1])")
    out = run_plan(p, inputs, shape, timeout_s=240, edit=edit)
    assert not all(v.ok for v in compare.against_reference(d, inputs, out).values())


def test_explain_names_the_chain_and_why_not():
    d = napkin.grad("attention", wrt=("Q",), saved=True, d=64)
    text = render_text(report(plan(d, "h100", BIG)))
    assert "a chain of products (per chunk of x" in text and "then dQ over it" in text
    # a dynamic head: the chain says why not; d = 40 is a chain, its head padded to 48 in
    # shared memory (compiler/headpad.py: Q K's k and the tiles read both ways), dQ's
    # fragments over 40

    def examined(grad):
        pr = prepare(grad, "h100", BIG)
        g = pr.graph
        stmts = _statements(g)
        members = set().union(*(nodes for nodes in stmts.values()
                                if not {array_name(g, n) for n in nodes} & {"D", "D:mul"}))
        k = fused_kernel(g, "k", members)
        return g, chain.examine(g, k, kernel_model(g, k, "x"), pr.target, pr.sizes)
    _, why = examined(napkin.grad(DYNAMIC, wrt=("Q",), saved=True))
    assert why == "`d` must be static (fix it with `axis d = 64` or -D, or plan for the size " \
        "(--shape d=64: specialised))"
    g, site = examined(napkin.grad("attention", wrt=("Q",), saved=True, d=40))
    assert isinstance(site, chain.ChainSite)
    padded = {(array_name(g, n), e) for n, _, e in site.padded}
    assert padded == {("Q", 48), ("K", 48), ("V", 48), ("dO", 48), ("S:contract[d]", 48),
                      ("dP", 48)}, padded      # (not dQ's products: 40 columns, 5 fragments)


def test_seeded_skip_bug_gives_wrong_values():
    # the causal test of the chain's prologue (masks.index_span) one chunk too eager: the
    # last chunk holding keys at or below the block's last query is not run
    d = napkin.grad("causal_attention", wrt=("Q",), saved=True, d=64)
    p = plan(d, "h100", BIG)
    shape = {"b": 1, "h": 1, "q": 150, "x": 150}
    inputs, _ = attention_inputs(shape, 64, True, seed=8)
    chunk = chains(p)[0].schedule.stream[1]

    def edit(src: str) -> str:
        assert "if (!(!(((long long)(dc) <=" in src
        return src.replace("if (!(!(((long long)(dc) <=", f"if (!(!(((long long)(dc) + {chunk} <=")
    out = run_plan(p, inputs, shape, timeout_s=240, edit=edit)
    assert not all(v.ok for v in compare.against_reference(d, inputs, out).values())


def test_row_vectors_are_read_once_and_a_seeded_row_bug_gives_wrong_values():
    """dQ's chain reads the saved logsumexp and D (arrays over its rows only) into registers
    before the chunks, two rows per lane and fragment (fg and fg + 8), and every element
    of every chunk reads them there; taking the first row's value for both gives wrong
    values."""
    d = napkin.grad("attention", wrt=("Q",), saved=True, d=64)
    p = plan(d, "h100", BIG)
    (kp,) = chains(p)
    src = render(lower(p))
    assert "rv0[i0][i4 / 2]" in src and "rv1[i0][i4 / 2]" in src
    shape = {"b": 1, "h": 1, "q": 40, "x": 24}
    inputs, _ = attention_inputs(shape, 64, False, seed=9)

    def edit(source: str) -> str:
        return source.replace("rv0[i0][i4 / 2]", "rv0[i0][0]")
    out = run_plan(p, inputs, shape, timeout_s=240, edit=edit)
    assert not all(v.ok for v in compare.against_reference(d, inputs, out).values())
