"""A mask read from integer inputs bounds each block's chunk loop (codegen/masks.data_span):
the block takes its rows' document ids to their least and greatest, tests the keys' ids one
position at a time, and runs only the chunks from the first to the last where the mask may
hold. Shown on the emulator by what the skipped chunks would have contributed (NaN in V at
another document's keys: a chunk that ran would turn 0 * NaN into NaN), the values against
the float64 formula, and the model's count of computed chunks against a count written here
from the rule itself."""

from __future__ import annotations

import math

import numpy as np
import pytest

import napkin

# doc 0 fills one whole 64-key chunk; the rest cross chunk and block boundaries; the last
# rows are padding past the documents (id 9 alone, a single token of its own)
LENGTHS = [64, 100, 37, 91, 1]


def _attention(Q, K, V, mask):
    Q, K, V = (a.astype(np.float64) for a in (Q, K, V))
    s = np.einsum("hqd,hxd->hqx", Q, K) / math.sqrt(Q.shape[-1])
    s = np.where(mask, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    l = e.sum(-1, keepdims=True)
    return np.einsum("hqx,hxd->hqd", np.where(l > 0, e / np.where(l > 0, l, 1), 0), V)


def _visited(doc, rows, chunk, causal=True):
    """The chunks (start positions) a block of these rows runs, by the rule: the first to
    the last chunk holding a key whose id lies within the rows' ids (and x <= q)."""
    lo, hi = doc[rows].min(), doc[rows].max()
    keys = [p for p in range(len(doc)) if lo <= doc[p] <= hi and (not causal or p <= rows[-1])]
    if not keys:
        return []
    return list(range(keys[0] // chunk * chunk, keys[-1] + 1, chunk))


@pytest.mark.parametrize("engine", ["tensor-cores", "cuda-cores"])
def test_a_block_never_runs_the_chunks_of_documents_it_does_not_hold(engine, rng):
    from napkin.compiler.plan import plan
    from napkin.pipeline import run_plan
    doc = np.repeat(np.arange(len(LENGTHS)), LENGTHS).astype(np.int32)
    n = len(doc)
    d = napkin.load("varlen_attention")
    p = plan(d, "h100", {"h": 2, "q": n, "x": n}, engine=engine)
    (kp,) = p.kernels
    tile, chunk = dict(kp.choice.group)["q"], kp.choice.stream[1]
    Q, K, V = (rng.standard_normal((2, n, 64)).astype(np.float16) for _ in range(3))
    V[:, :LENGTHS[0]] = np.nan                  # doc 0's values: NaN wherever they are read
    out = run_plan(p, dict(Q=Q, K=K, V=V, doc=doc), p.sizes)["O"].astype(np.float64)
    clean = V.copy()
    clean[:, :LENGTHS[0]] = 0
    same = (doc[:, None] == doc[None, :]) & (np.arange(n)[None, :] <= np.arange(n)[:, None])
    want = _attention(Q, K, clean, same)
    free = []                                   # rows of blocks that never run doc 0's chunk
    for start in range(0, n, tile):
        rows = list(range(start, min(start + tile, n)))
        if all(c >= LENGTHS[0] for c in _visited(doc, rows, chunk)):
            free += rows
    assert len(free) > n // 2, (tile, chunk)
    assert np.isfinite(out[:, free]).all()     # unbounded, every row past doc 0 would be NaN
    np.testing.assert_allclose(out[:, free], want[:, free], atol=2e-2)
    held = [r for r in range(n) if r not in free]
    assert np.isnan(out[:, [r for r in held if doc[r] == 0]]).all()   # doc 0 reads its NaN


def test_the_model_counts_the_chunks_the_blocks_run(rng):
    """The planned fraction of (block, chunk) pairs computed, with the ids given for planning,
    is the rule's count (here, in Python) at the plan's own tiles; without ids it is the
    causal half, and the prediction is lower with them."""
    from napkin.compiler.plan import plan
    from napkin.compiler.variants import with_choices
    lengths = rng.integers(1, 400, 23)
    doc = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
    n = len(doc)
    d = napkin.load("varlen_attention")
    shape = {"h": 4, "q": n, "x": n}
    p = plan(d, "h100", shape, data={"doc": doc})
    blind = plan(d, "h100", shape)
    for kp in (p.kernels[0], with_choices(p, [blind.kernels[0].choice]).kernels[0]):
        tile, chunk = dict(kp.choice.group)["q"], kp.choice.stream[1]
        chunks = -(-n // chunk)
        computed = 0
        blocks = range(0, n, tile)
        for start in blocks:
            rows = list(range(start, min(start + tile, n)))
            computed += sum(c <= rows[-1] for c in _visited(doc, rows, chunk))
        assert kp.cost.computed == pytest.approx(computed / (len(blocks) * chunks), abs=1e-9)
    assert abs(blind.kernels[0].cost.computed - 0.5) < 0.02
    assert p.time < 0.5 * blind.time


def test_planning_data_is_checked():
    from napkin.compiler.plan import plan
    from napkin.diagrams.diagnostics import NapkinError
    d = napkin.load("varlen_attention")
    shape = {"h": 2, "q": 100, "x": 100}
    with pytest.raises(NapkinError, match="N0608.*has shape"):
        plan(d, "h100", shape, data={"doc": np.zeros(99, np.int32)})
    with pytest.raises(NapkinError, match="N0608.*not an integer or boolean input"):
        plan(d, "h100", shape, data={"Q": np.zeros(100, np.int32)})
    # floats are refused, not truncated into ids (0.7 had become document 0), whether given
    # to plan() or through the pipeline's options (napkin explain --data), and the message
    # names the dtype given
    ids = np.repeat([0.0, 0.7], 50)
    with pytest.raises(NapkinError, match="N0608.*dtype float64"):
        plan(d, "h100", shape, data={"doc": ids})
    from napkin.pipeline import Options, plan as pipeline_plan
    with pytest.raises(NapkinError, match="N0608.*dtype float64"):
        pipeline_plan(d, Options.make(target="h100", shape=shape, data={"doc": ids}))
    with pytest.raises(NapkinError, match="N0608.*shape \\(99,\\) and dtype int32"):
        pipeline_plan(d, Options.make(target="h100", shape=shape,
                                      data={"doc": np.zeros(99, np.int32)}))


def test_explain_plans_on_ids_from_a_file(tmp_path, capsys):
    from napkin.cli import main
    doc = np.repeat(np.arange(16), 1024).astype(np.int32)
    np.save(tmp_path / "docs.npy", doc)
    args = ["explain", "varlen_attention", "--shape", "h=8,q=16384,x=16384"]
    assert main(args + ["--data", f"doc={tmp_path / 'docs.npy'}"]) == 0
    text = capsys.readouterr().out
    assert "counted on the values given for doc" in text
    assert "computes 4% of the (block, chunk) pairs" in text      # 72 of 2048 per document
    assert main(args + ["--data", f"doc={tmp_path / 'none.npy'}"]) == 1
    assert "N0806" in capsys.readouterr().err


def test_chunks_inside_one_document_skip_the_mask_per_score(rng):
    """Rows of one long document: the chunks below the block's first row inside that
    document hold the mask everywhere (the block's run, masks.data_span), so the attention
    kernel computes them without testing each score, as causal attention does below its
    diagonal; the values still match the formula, the documents' edges included."""
    from napkin.codegen.lower import lower
    from napkin.codegen.render import render
    from napkin.compiler.plan import plan
    from napkin.pipeline import run_plan
    lengths = [130, 400, 70]
    doc = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
    n = len(doc)
    d = napkin.load("varlen_attention")
    p = plan(d, "h100", {"h": 1, "q": n, "x": n}, engine="tensor-cores", data={"doc": doc})
    (kp,) = p.kernels
    tile, chunk = dict(kp.choice.group)["q"], kp.choice.stream[1]
    inside = 0                                  # (block, chunk) pairs the rule calls whole
    for start in range(0, n, tile):
        rows = np.arange(start, min(start + tile, n))
        if len(set(doc[rows])) == 1:
            first = np.flatnonzero(doc == doc[rows[0]])[0]
            inside += sum(1 for c in range(0, n - chunk + 1, chunk)
                          if c >= first and c + chunk - 1 <= rows[0])
    assert inside > 0
    assert "mrun && (long long)c0 >= mfirst" in render(lower(p))
    Q, K, V = (rng.standard_normal((1, n, 64)).astype(np.float16) for _ in range(3))
    out = run_plan(p, dict(Q=Q, K=K, V=V, doc=doc), p.sizes)["O"].astype(np.float64)
    same = (doc[:, None] == doc[None, :]) & (np.arange(n)[None, :] <= np.arange(n)[:, None])
    np.testing.assert_allclose(out, _attention(Q, K, V, same), atol=2e-2)
    assert kp.cost.computed > 0 and kp.cost.computed < 0.6
    # the test can fail: a run taken to start at the first key lets doc 1's rows see doc 0
    wrong = run_plan(p, dict(Q=Q, K=K, V=V, doc=doc), p.sizes, edit=lambda src: src.replace(
        "(long long)c0 >= mfirst", "(long long)c0 >= 0"))["O"].astype(np.float64)
    assert np.abs(wrong - _attention(Q, K, V, same)).max() > 0.1


def test_axes_of_one_size_class_take_one_size(capsys):
    """varlen reads doc[x] at q: q and x are one size. A plan or random inputs asked for two
    sizes there is refused (it was planned at one and run at the other)."""
    from napkin.cli import main
    from napkin.compiler.plan import plan
    from napkin.diagrams.diagnostics import NapkinError
    d = napkin.load("varlen_attention")
    with pytest.raises(NapkinError, match="N0303.*q=77 and x=130"):
        plan(d, "h100", {"h": 2, "q": 77, "x": 130})
    assert plan(d, "h100", {"h": 2, "q": 77}).sizes["x"] == 77
    assert main(["run", "varlen_attention", "--shape", "h=2,q=77,x=130"]) == 2
    assert "the diagram makes `q` and `x` one size" in capsys.readouterr().err


@pytest.mark.thorough      # (3-4 CPU-s of planning at scale)
def test_packed_documents_are_predicted_as_fast_as_one_by_one(rng):
    """Issue 18's case: 16 documents of mixed lengths packed into 16k tokens (h=16, d=64,
    h100), planned on their ids, within 1.3x of causal attention over the documents one by
    one (model figures: benchmarks/varlen_check.py prints them)."""
    from napkin.compiler.plan import plan
    from napkin.explain import render_text, report
    raw = rng.lognormal(0.0, 0.8, 16)
    lengths = np.maximum(1, np.round(raw / raw.sum() * 16384)).astype(int)
    lengths[-1] += 16384 - lengths.sum()
    doc = np.repeat(np.arange(16), lengths).astype(np.int32)
    packed = plan(napkin.load("varlen_attention"), "h100", {"h": 16, "q": 16384, "x": 16384},
                  data={"doc": doc})
    causal = napkin.load("causal_attention", d=64)
    alone = sum(plan(causal, "h100", {"b": 1, "h": 16, "q": int(n), "x": int(n)}).time
                for n in lengths)
    assert packed.time < 1.3 * alone, (packed.time, alone)
    text = render_text(report(packed, compare=False))
    assert "each block bounds its chunks by doc first" in text


def test_the_backward_chains_bound_their_loops_by_a_padding_mask():
    """The gradient of attention over padded sequences (`x < len[b]`, causal): the forward
    and both chains of products bound their chunk loops by len (a block of keys past the
    sequence's end runs none: its dK and dV rows are 0); emulated against the float64
    reference at odd sizes, one sequence shorter than a block."""
    from napkin.commands.run import random_inputs
    from napkin.compiler.plan import plan
    from napkin.pipeline import lowered, run_plan
    from napkin.runtime import compare
    d = napkin.load("axis b, h, q, x\naxis d = 64\nin Q[b h q d], K[b h x d], V[b h x d]: f16\n"
                    "in len[b]: i32\n"
                    "S[b h q x] = where(x < len[b] and x <= q, Q * K / sqrt(size(d)), -inf)\n"
                    "P[b h q x] = softmax[x](S)\nO[b h q d] = P * V\nout O: f16\n")
    g = napkin.grad(d)
    p = plan(g, "h100", {"b": 2, "h": 2, "q": 2048, "x": 2048})
    assert [kp.schedule.engine for kp in p.kernels] == ["attention", "chain of products",
                                                         "chain of products"]
    assert lowered(p)[1].count("napkin_block_range(pfirst") == 3
    inputs = random_inputs(g, {"b": 2, "h": 2, "q": 150, "x": 150}, 3)
    inputs["len"] = np.array([37, 150], np.int32)
    out = run_plan(p, inputs, {"b": 2, "h": 2, "q": 150, "x": 150, "d": 64}, timeout_s=600)
    for k, v in compare.against_reference(g, inputs, out, plan=p).items():
        assert v.ok, v.message
    assert not out["dK"][0, :, 37:].any() and not out["dV"][0, :, 37:].any()


def test_the_varlen_gradient_is_flashattention2s_three_kernels(rng):
    """varlen's gradient plans as attention's does (the chains read doc at renamed positions:
    chain._elementwise takes views of loads): the forward again with D, then dQ's and dK and
    dV's chains, nothing N x N in global memory, each bounding its loop by the documents. In
    dK and dV's chain the rows are keys: doc[x] is a row vector there and doc[q] a view of
    the same input over the streamed queries, which must not be read from the row vector
    (MmaLowering.registered). Emulated against the float64 reference."""
    from napkin.commands.run import random_inputs
    from napkin.compiler.plan import plan
    from napkin.pipeline import lowered, run_plan
    from napkin.runtime import compare
    g = napkin.grad(napkin.load("varlen_attention"))
    p = plan(g, "h100", {"h": 2, "q": 2048, "x": 2048})
    assert [kp.schedule.engine for kp in p.kernels] == ["attention", "chain of products",
                                                         "chain of products"]
    for kp in p.kernels:
        for n in kp.kernel.stores:
            assert not {"q", "x"} <= set(p.graph.nodes[n]["type"].axes)
    assert lowered(p)[1].count("napkin_block_range(pfirst") == 3
    lengths = [1, 70, 0, 57, 2, 73, 40]
    doc = np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)
    n = len(doc)
    inputs = random_inputs(g, {"h": 2, "q": n, "x": n}, 3)
    inputs["doc"] = doc
    out = run_plan(p, inputs, {"h": 2, "q": n, "x": n, "d": 64}, timeout_s=600)
    for k, v in compare.against_reference(g, inputs, out, plan=p).items():
        assert v.ok, v.message
