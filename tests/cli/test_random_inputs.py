"""`napkin run`'s random inputs (commands.run.random_inputs): an integer the diagram reads
only as a position along an axis spans that axis, one compared with an axis's position spans
up to its size, labels compared with labels take 8 values; any other integer stays below
every size (in range whatever it indexes)."""

from __future__ import annotations

import numpy as np

import napkin
from napkin.commands.run import LABELS, random_inputs, ranges
from napkin.runtime import compare


def test_a_decode_steps_page_table_and_lengths_span_their_axes():
    """Paged attention decoding one token (q = 1): the page table spans the cache's n pages
    and the lengths the x keys (both were 0 under the smallest size, 1: every key masked, one
    page read), and the interpreter's output is the float64 reference's on them."""
    d = napkin.load("paged_attention", x=256, j=16)     # (x <= j * size(P))
    shape = {"b": 3, "g": 2, "r": 2, "q": 1, "n": 37}
    x = d.axes["x"]
    assert ranges(d.ir, {**shape, **{a: s for a, s in d.axes.items() if s}}) == \
        {"pages": 37, "len": x + 1}
    inputs = random_inputs(d, shape, 5)
    pages, lengths = inputs["pages"], inputs["len"]
    assert pages.min() >= 0 and pages.max() < 37 and len(np.unique(pages)) > 20
    assert lengths.min() >= 0 and lengths.max() <= x and lengths.max() > x // 4
    (got,) = napkin.run(d, *inputs.values(), backend="interpret")
    verdicts = compare.against_reference(d, inputs, {"O": got})
    assert all(v.ok for v in verdicts.values()), verdicts
    assert np.abs(got).max() > 0.05        # (not every key masked: a non-trivial output)


def test_labels_positions_and_arithmetic():
    """A label compared with a position spans the axis (cross_entropy's label over v), a
    token read as an embedding's row spans the vocabulary, document ids compared with each
    other take LABELS values; an integer also used in arithmetic keeps the common bound (the
    smallest size, 3 here), and a position along an axis of one element is 0."""
    ce = napkin.load("cross_entropy")
    assert ranges(ce.ir, {"t": 5, "v": 50}) == {"label": 50}
    emb = napkin.load("embedding")
    assert ranges(emb.ir, {"t": 5, "v": 1000, "m": 8}) == {"tok": 1000}
    varlen = napkin.load("varlen_attention")
    assert ranges(varlen.ir, {"h": 1, "q": 5, "x": 5, "d": 64})["doc"] == LABELS
    mixed = napkin.load("axis t, v\nin E[v]: f32\nin tok[t]: i32\n"
                        "Y[t] = E[tok[t]] * tok\nout Y: f32\n")
    assert ranges(mixed.ir, {"t": 3, "v": 100}) == {}
    assert random_inputs(mixed, {"t": 3, "v": 100}, 1)["tok"].max() < 3
    one = napkin.load("axis t, v\nin E[v]: f32\nin tok[t]: i32\nY[t] = E[tok[t]]\nout Y: f32\n")
    drawn = random_inputs(one, {"t": 9, "v": 1}, 1)["tok"]
    assert (drawn == 0).all()


def test_a_length_shifted_by_positions_and_sizes_spans_the_shifted_comparison():
    """`x <= len[b] - size(q) + q` (a causal mask ending at each sequence's length): the
    length is compared with x's position after a shift by sizes and positions, so it spans
    x's size plus the largest shift (it was drawn below the smallest size: every row had at
    most one key and the gradients of such masks came out exactly zero)."""
    d = napkin.load("axis b, h, q, x\naxis d = 64\nin Q[b h q d]: f16\nin K[b h x d]: f16\n"
                    "in V[b h x d]: f16\nin len[b]: i32\n"
                    "S[b h q x] = where(x <= len[b] - size(q) + q, Q * K / sqrt(size(d)), -inf)\n"
                    "O[b h q d] = softmax[x](S) * V\nout O: f16\n")
    shape = {"b": 40, "h": 2, "q": 5, "x": 40}
    assert ranges(d.ir, {**shape, "d": 64}) == {"len": 41 + 5 + 4}
    lengths = random_inputs(d, shape, 3)["len"]
    assert lengths.max() > 30 and len(np.unique(lengths)) > 20
    inputs = random_inputs(d, {**shape, "b": 3}, 3)
    (got,) = napkin.run(d, *inputs.values(), backend="interpret")
    verdicts = compare.against_reference(d, inputs, {"O": got})
    assert all(v.ok for v in verdicts.values()), verdicts
