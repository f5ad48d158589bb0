"""The library diagrams of language 1.1 (integer labels, erf, soft-capping, ALiBi, sliding
windows, document ids, embedding lookups, rotate-half, a paged KV cache) on every CPU backend,
against NumPy formulas written independently here, on odd sizes next to tile multiples: one
emulator build per diagram (in f32, so that the comparison is with the formula itself, not
with a rounded reference; paged_attention has a second, split over its keys)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import napkin
from napkin.diagrams.sources import library_source

NEW = ("alibi_attention", "cross_entropy", "embedding", "gelu_erf", "paged_attention", "rope",
       "sliding_window_attention", "softcap_attention", "varlen_attention")


def load(name: str, **sizes):
    """The library diagram with its f16 arrays in f32."""
    text = re.sub(r":\s*f16\b", ": f32", library_source(name).text)
    return napkin.load(text, **sizes)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def attention(Q, K, V, scores, mask):
    """softmax over keys of scores(s) where mask, else -inf, times V; a fully masked row is 0."""
    Q, K, V = (a.astype(np.float64) for a in (Q, K, V))
    s = np.einsum("...qd,...xd->...qx", Q, K) / math.sqrt(Q.shape[-1])
    s = np.where(mask, scores(s), -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    l = e.sum(-1, keepdims=True)
    p = np.where(l > 0, e / np.where(l > 0, l, 1), 0)
    return np.einsum("...qx,...xd->...qd", p, V)


def case(name: str, rng):
    """(diagram, inputs, expected outputs) at odd sizes."""
    b, h, q, d = 1, 3, 37, 64
    qi, xi = np.arange(q)[:, None], np.arange(q)[None, :]
    if name == "cross_entropy":
        t, v = 29, 67
        Z, label = f32(rng, t, v) * 3, rng.integers(0, v, t).astype(np.int32)
        z = Z.astype(np.float64)
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        return load(name), dict(Z=Z, label=label), {"L": lse - z[np.arange(t), label]}
    if name == "gelu_erf":
        X, W = f32(rng, 31, 47), f32(rng, 47, 29)
        hh = X.astype(np.float64) @ W.astype(np.float64)
        erf = np.vectorize(math.erf)(hh / math.sqrt(2))
        return load(name), dict(X=X, W=W), {"Y": 0.5 * hh * (1 + erf)}
    if name == "embedding":
        E, tok = f32(rng, 53, 24), rng.integers(0, 53, 37).astype(np.int32)
        tok[:2] = [0, 52]                                    # the first and the last row
        return load(name), dict(E=E, tok=tok), {"X": E.astype(np.float64)[tok]}
    if name == "rope":
        X, ang = f32(rng, 29, 3, 16), rng.uniform(0, 2 * math.pi, (29, 16))
        C, S = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        x = X.astype(np.float64)
        rotated = np.concatenate([-x[..., 8:], x[..., :8]], axis=-1)
        return load(name), dict(X=X, C=C, S=S), {"R": x * C[:, None] + rotated * S[:, None]}
    if name == "paged_attention":
        # one decode query per sequence; 37 keys: 3 pages of 16, the last one partial, and not
        # a multiple of any tile; lengths: a single key, none (a fully masked row), every key
        # and past them, an odd one inside the last page
        return paged_case(rng, b=5, g=2, r=3, q=1, n=17, x=37, P=16, lengths=[1, 0, 37, 40, 23])
    Q, K, V = f32(rng, b, h, q, d), f32(rng, b, h, q, d), f32(rng, b, h, q, d)
    if name == "softcap_attention":
        Q, K = Q * 30, K * 30           # scores in the hundreds: the cap matters
        want = attention(Q, K, V, lambda s: 50 * np.tanh(s / 50), True)
        return load(name), dict(Q=Q, K=K, V=V), {"O": want}
    if name == "alibi_attention":
        slope = 2.0 ** (-8.0 * (np.arange(h) + 1) / h)
        want = attention(Q, K, V, lambda s: s + slope[:, None, None] * (xi - qi), xi <= qi)
        return load(name), dict(Q=Q, K=K, V=V), {"O": want}
    if name == "sliding_window_attention":
        w = 9
        want = attention(Q, K, V, lambda s: s, (xi <= qi) & (qi - xi < w))
        return load(name, w=w), dict(Q=Q, K=K, V=V), {"O": want}
    assert name == "varlen_attention"
    Q, K, V = Q[0], K[0], V[0]
    lengths = [1, 12, 0, 17, 7]       # a single token, an empty document, odd lengths
    doc = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
    assert len(doc) == q
    same = doc[:, None] == doc[None, :]
    want = attention(Q, K, V, lambda s: s, same & (xi <= qi))
    return load(name), dict(Q=Q, K=K, V=V, doc=doc), {"O": want}


def paged_case(rng, b, g, r, q, n, x, P, lengths, d=64):
    """paged_attention at x keys and pages of P rows: a page table of distinct pages in random
    order (the pages past a sequence's length still valid rows of the cache), and the output
    of the keys gathered into place by NumPy."""
    j = -(-x // P)
    Q, Kc, Vc = f32(rng, b, g, r, q, d), f32(rng, n, P, g, d), f32(rng, n, P, g, d)
    pages = rng.permutation(n)[:b * j].reshape(b, j).astype(np.int32)
    length = np.array(lengths, dtype=np.int32)
    pos = np.arange(x)
    at = pages[:, pos // P], pos % P                     # [b x]: page and row of each key
    K = np.moveaxis(Kc[at], 1, 2)[:, :, None]            # [b g 1 x d]: shared by the r heads
    V = np.moveaxis(Vc[at], 1, 2)[:, :, None]
    visible = (pos[None, :] < length[:, None])[:, None, None, None, :]
    want = attention(Q, K, V, lambda s: s, visible)
    return (load("paged_attention", x=x, j=j, P=P), dict(Q=Q, Kc=Kc, Vc=Vc, pages=pages,
                                                       len=length), {"O": want})


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
@pytest.mark.parametrize("name", NEW)
def test_new_library_diagram_matches_numpy(name, backend, rng):
    d, inputs, want = case(name, rng)
    got = dict(zip([s.name for s in d.outputs], napkin.run(d, **inputs, backend=backend)))
    for key, expected in want.items():
        tol = 1e-6 if backend == "reference" else 2e-5       # f32 outputs; f32 kernels
        scale = max(1.0, float(np.max(np.abs(expected))))
        np.testing.assert_allclose(got[key], expected, rtol=tol, atol=tol * scale)


def test_the_sliding_window_and_documents_mask_something(rng):
    """The cases above are not plain causal attention in disguise."""
    for name in ("sliding_window_attention", "varlen_attention"):
        d, inputs, want = case(name, rng)
        causal = attention(inputs["Q"], inputs["K"], inputs["V"], lambda s: s,
                           np.arange(37)[None, :] <= np.arange(37)[:, None])
        assert np.max(np.abs(want["O"] - causal)) > 0.1


@pytest.mark.parametrize("backend", ["reference", "interpret", "emulate"])
def test_paged_attention_with_several_queries_and_small_pages(backend, rng):
    """Three queries per sequence (speculative decoding's few), pages of 4 rows over 50 keys
    (13 pages, the last one half full), 4 query heads per key/value head; a fully masked
    sequence gives 0 (docs/language.md: a fully masked softmax row is 0, not NaN). The keys
    split in two shares of 25 (flash-decoding, as the plan at decode sizes does), so that the
    split's gathers and the merge of partial states are run too."""
    d, inputs, want = paged_case(rng, b=3, g=3, r=4, q=3, n=41, x=50, P=4, lengths=[50, 7, 0])
    (O,) = napkin.run(d, **inputs, backend=backend, split={"x": 2})
    tol = 1e-6 if backend == "reference" else 2e-5       # as above
    scale = max(1.0, float(np.max(np.abs(want["O"]))))
    np.testing.assert_allclose(O, want["O"], rtol=tol, atol=tol * scale)
    assert np.all(O[2] == 0)


def test_the_page_table_and_the_lengths_matter(rng):
    """The paged case above is not attention over the cache's rows in order, nor unmasked."""
    d, inputs, want = case("paged_attention", rng)
    in_order = dict(inputs, pages=np.arange(inputs["pages"].size, dtype=np.int32)
                    .reshape(inputs["pages"].shape))
    every_key = dict(inputs, len=np.full_like(inputs["len"], 37))
    for other in (in_order, every_key):
        (O,) = napkin.run(d, **other)
        assert np.max(np.abs(O - want["O"])) > 0.1
    assert np.all(want["O"][1] == 0) and np.all(np.isfinite(want["O"]))


def test_paged_attention_decodes_in_one_fused_kernel_split_over_the_keys():
    """At q=1 (8 sequences, 8 key/value heads of 8 query heads each, 4096 keys in pages of 16
    of a 32k-page cache) split over the keys by 16, the scores and probabilities stay on chip:
    one kernel computes S, A and the partial states of the split (flash-decoding), a second
    merges them; the gathered keys and values are copied row by row through the page table
    into the chunk's tiles (FlashAttention-2 on tensor cores: compiler/rowsource.py).
    Unhinted, the planner's final plans price writing the 8 MB of scores (one row of 4096 per
    query) about as fast (206 against 210 us, model h100), and it takes the faster."""
    from napkin.compiler.model import array_name
    from napkin.compiler.plan import plan
    from napkin.explain import report
    sizes = {"b": 8, "g": 8, "r": 8, "q": 1, "n": 32768}
    p = plan(napkin.load("paged_attention"), "h100", sizes, overrides={"split": {"x": 16}})
    own = plan(napkin.load("paged_attention"), "h100", sizes)
    assert own.time <= p.time < 1.1 * own.time
    rep = report(p)
    assert rep["split"]["axis"] == "x" and rep["split"]["merged_by"] == ["k1"]
    assert [k["equations"] for k in rep["kernels"]] == [["S", "A", "O.part"], ["O"]]
    stored = [[array_name(p.graph, n) for n in kp.kernel.stores] for kp in p.kernels]
    assert stored == [["O.part", "O.lse"], ["O"]]
    levels = {}
    for b in rep["kernels"][0]["buffers"]:
        levels.setdefault(b["name"], set()).add(b["level"])
    # on tensor cores (the planner's choice at these sizes) the gathered rows are staged as
    # the chunk's K and V tiles, the page table read where a row is copied, never staged
    assert p.kernels[0].schedule.engine == "attention"
    for name in ("Kc[* * g d]", "Vc[* * g d]"):
        assert levels[name] == {"smem", "registers"}, levels
    assert levels["pages[b *]"] == {"registers"}, levels


def test_alibi_attention_on_tensor_cores_emulated():
    """f16 on the flash (mma.sync) kernel, its biases computed from the head and position
    indices inside the score tile; the tolerance rule against the float64 reference."""
    from napkin.commands.run import random_inputs
    from napkin.compiler.plan import plan
    from napkin.pipeline import run_plan
    from napkin.runtime import compare, reference
    d = napkin.load("alibi_attention")
    shape = {"b": 1, "h": 2, "q": 70, "x": 70}
    p = plan(d, "h100", shape, engine="tensor-cores")
    assert [k.schedule.engine for k in p.kernels] == ["attention"]
    inputs = random_inputs(d, shape, 3)
    out = run_plan(p, inputs, p.sizes)["O"]
    ref = reference.evaluate(d, inputs)["O"]
    low = reference.evaluate(d, inputs, precision="lowp")["O"]
    verdict = compare.check(out, ref, low, "f16", "O")
    assert verdict.ok, verdict.message


# Documents of mixed lengths packed into 203 tokens (a single token, an empty document, one
# longer than a 64-key chunk, documents across chunk and block boundaries): with several
# chunks per block, the chunks above the diagonal are skipped.
DOC_LENGTHS = [1, 70, 0, 57, 2, 73]
VARLEN_MASKS = {
    "documents first": "doc[q] == doc[x] and x <= q",
    "positions first": "x <= q and doc[q] == doc[x]",
    # an `or` with a condition read from data may hold anywhere: nothing may be skipped
    "or": "doc[q] == doc[x] or x <= q",
}


def _varlen(cond: str):
    return napkin.load("axis h, q, x\naxis d = 64\n"
                       "in Q[h q d]: f16, K[h x d]: f16, V[h x d]: f16\nin doc[x]: i32\n"
                       f"S[h q x] = where({cond}, Q * K / sqrt(size(d)), -inf)\n"
                       "P[h q x] = softmax[x](S)\nO[h q d] = P * V\nout O: f16")


def _one_kernel(d, shape, engine):
    """The plan with every statement in one kernel: on the CUDA cores at 2 x 203 x 203 the
    model prices S through global memory lower (7.7 us against 8.2 us fused, model figures:
    the fused kernel reads K and V once per query, issue_simt READ_NARROW, in 51 blocks),
    and the mask's chunk skipping is what is under test here."""
    from napkin.compiler.fuse import regroup, unfused_kernels
    from napkin.compiler.kernel_plan import KernelPlanner
    from napkin.compiler.plan import Fused, prepare, tile
    pr = prepare(d, "h100", shape)
    every = frozenset().union(*(k.equations for k in unfused_kernels(pr.graph)))
    kernels = tuple(regroup(pr.graph, [(every, frozenset())]))
    return _streamed(tile(Fused(pr, kernels, KernelPlanner(pr.graph, pr.target, pr.sizes,
                                                           pr.hints, engine))))


def _streamed(p, chunk: int = 32):
    """`p` with its one kernel streaming x in chunks of `chunk` where the planner keeps the
    keys whole in a block (the CUDA cores at these sizes, since the model charges the lanes'
    replicated softmax, compiler/issue_pair.py): the chunks a mask skips are under test."""
    from dataclasses import replace
    from napkin.compiler.variants import with_choices
    (kp,) = p.kernels
    if kp.choice.stream is not None:
        return p
    return with_choices(p, [replace(kp.choice, stream=("x", chunk))])


@pytest.mark.parametrize("mask, engine", [
    *[(m, "tensor-cores") for m in VARLEN_MASKS], ("documents first", "cuda-cores"),
    # (the CUDA cores' chunk bounds of the other two: the same rule, the thorough tier's)
    *[pytest.param(m, "cuda-cores", marks=pytest.mark.thorough) for m in VARLEN_MASKS
      if m != "documents first"]])
def test_document_masks_skip_only_what_their_positions_hide(mask, engine, rng):
    """A conjunction skips the chunks its readable part (`x <= q`) hides, whatever the
    unreadable part (a comparison of gathered document ids) says; a disjunction with such a
    part skips nothing. Emulated against the float64 reference by the tolerance rule, and
    against the NumPy formula."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.compiler.plan import plan
    from napkin.pipeline import run_plan
    from napkin.runtime import compare, reference
    d = _varlen(VARLEN_MASKS[mask])
    n = sum(DOC_LENGTHS)
    shape = {"h": 2, "q": n, "x": n}
    p = plan(d, "h100", shape, engine=engine) if engine == "tensor-cores" else \
        _one_kernel(d, shape, engine)
    assert [k.schedule.engine for k in p.kernels] == \
        ["attention" if engine == "tensor-cores" else "cuda cores"]
    source = render(lower(p))
    skips = [line for line in source.splitlines() if "(long long)(c0" in line
             and ("if (!(!(" in line or "continue;" in line)]
    assert bool(skips) == (mask != "or"), skips
    # the mask reads doc: every block bounds its chunks by it first (masks.data_span)
    assert p.kernels[0].model.mask is not None and "pfirst" in source
    doc = np.repeat(np.arange(len(DOC_LENGTHS)), DOC_LENGTHS).astype(np.int32)
    Q, K, V = (rng.standard_normal((2, n, 64)).astype(np.float16) for _ in range(3))
    inputs = dict(Q=Q, K=K, V=V, doc=doc)
    out = run_plan(p, inputs, p.sizes)["O"]
    ref = reference.evaluate(d, inputs)["O"]
    low = reference.evaluate(d, inputs, precision="lowp")["O"]
    verdict = compare.check(out, ref, low, "f16", "O")
    assert verdict.ok, verdict.message
    qi, xi = np.arange(n)[:, None], np.arange(n)[None, :]
    same = doc[:, None] == doc[None, :]
    visible = (same | (xi <= qi)) if mask == "or" else (same & (xi <= qi))
    want = attention(Q.astype(np.float64), K.astype(np.float64), V.astype(np.float64),
                     lambda s: s, visible)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=2e-2)


def test_varlen_attention_is_predicted_to_skip_the_upper_triangle():
    """Packed into 16k tokens with no document ids given for planning, the documents' causal
    part hides half of the (block, chunk) pairs and the comparison of ids is counted as
    holding anywhere (the kernel still bounds its chunks by them: tests/runtime/
    test_data_span.py); explain says both."""
    from napkin.explain import render_text, report
    from napkin.compiler.plan import plan
    shape = {"h": 16, "q": 16384, "x": 16384}
    varlen = plan(napkin.load("varlen_attention"), "h100", shape)
    dense = plan(_varlen("doc[q] == doc[x]"), "h100", shape)
    (kp,) = varlen.kernels
    assert abs(kp.cost.computed - 0.5) < 0.01 and dense.kernels[0].cost.computed == 1.0
    assert varlen.time < 0.85 * dense.time
    text = render_text(report(varlen, compare=False))
    assert "skips the chunks of x where (doc[q] == doc[x]) and (x <= q) holds nowhere: " \
        "computes 50% of the" in text
    assert "no values given for doc: counted as holding anywhere" in text


@pytest.mark.parametrize("engine", ["tensor-cores", "cuda-cores"])
def test_a_named_mask_skips_as_the_model_says(engine, rng):
    """`M[q x] = x <= q` then `where(M, ...)`: the lowering reads the condition through the
    name as the model does (it had charged half the chunks and the kernel computed them all)."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.compiler.plan import plan
    from napkin.pipeline import run_plan
    from napkin.runtime import compare, reference
    d = napkin.load("axis h, q, x\naxis d = 64\n"
                    "in Q[h q d]: f16, K[h x d]: f16, V[h x d]: f16\nM[q x] = x <= q\n"
                    "S[h q x] = where(M, Q * K / sqrt(size(d)), -inf)\n"
                    "P[h q x] = softmax[x](S)\nO[h q d] = P * V\nout O: f16")
    shape = {"h": 2, "q": 203, "x": 203}
    p = plan(d, "h100", shape, engine=engine) if engine == "tensor-cores" else \
        _one_kernel(d, shape, engine)
    assert p.kernels[0].model.mask is not None and p.kernels[0].cost.computed < 1.0
    source = render(lower(p))
    # (the CUDA cores test each chunk in the loop; the tensor cores in their prologue over
    # the chunks, masks.index_span, bounding the loop)
    assert any(("(long long)(c0" in line or "(long long)(dc" in line)
               and ("if (!(!(" in line or "continue;" in line) for line in source.splitlines())
    inputs = {k: rng.standard_normal((2, 203, 64)).astype(np.float16) for k in "QKV"}
    out = run_plan(p, inputs, p.sizes)["O"]
    verdict = compare.check(out, reference.evaluate(d, inputs)["O"],
                            reference.evaluate(d, inputs, precision="lowp")["O"], "f16", "O")
    assert verdict.ok, verdict.message
