"""napkin.torch.op: a PyTorch custom op from a compiled diagram, checked with opcheck (CPU)."""

from __future__ import annotations

import numpy as np

import napkin


def test_attention_op_passes_opcheck_and_matches_the_reference():
    import torch                    # (here: collecting the file does not import PyTorch)
    import napkin.torch as napkin_torch
    op = napkin_torch.op(napkin.compile("attention", backend="reference"), "napkin_tests::attention")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g).to(torch.float16)
               for s in ((2, 3, 7, 64), (2, 3, 11, 64), (2, 3, 11, 64)))
    out = op(q, k, v)
    (expected,) = napkin.run("attention", q.numpy(), k.numpy(), v.numpy())
    assert out.dtype == torch.float16 and np.array_equal(out.numpy(), expected)
    result = torch.library.opcheck(op, (q, k, v))
    assert set(result.values()) == {"SUCCESS"}


def test_multi_output_op_fake_shapes():
    import torch                    # (here: collecting the file does not import PyTorch)
    import napkin.torch as napkin_torch
    text = "axis r, c\nin X[r c]: f32\nm[r] = max[c](X)\nY[r c] = X - m\nout m: f32, Y: bf16"
    op = napkin_torch.op(napkin.compile(text, backend="reference"), "napkin_tests::two")
    x = torch.randn(5, 9)
    m, y = op(x)
    assert m.shape == (5,) and y.shape == (5, 9) and y.dtype == torch.bfloat16
    assert set(torch.library.opcheck(op, (x,)).values()) == {"SUCCESS"}
