"""napkin.torch ops are differentiable: their backward is napkin.grad of the diagram (CPU)."""

from __future__ import annotations

import napkin

ATTENTION_F64 = """
axis b, q, x, d
in Q[b q d]: f32
in K[b x d]: f32
in V[b x d]: f32
S[b q x] = Q * K / sqrt(size(d))
P[b q x] = softmax[x](S)
O[b q d] = P * V
out O: f32
"""


def test_backward_through_the_op_matches_pytorchs_autograd_and_passes_opcheck():
    import torch                    # (here: collecting the file does not import PyTorch)
    import napkin.torch as napkin_torch
    # (torch.autograd.gradcheck needs float64 tensors; napkin's widest dtype is f32, so the
    # oracle is PyTorch's own autograd of the same attention)
    op = napkin_torch.op(napkin.compile(ATTENTION_F64, backend="reference"), "napkin_grad_tests::att")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g, dtype=torch.float32, requires_grad=True)
               for s in ((2, 5, 3), (2, 7, 3), (2, 7, 3)))
    out = op(q, k, v)
    dO = torch.randn(out.shape, generator=g)
    out.backward(dO)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(q2, k2, v2).backward(dO)
    for mine, theirs in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)
    assert set(torch.library.opcheck(op, (q, k, v)).values()) == {"SUCCESS"}
    # FlashAttention's backward: the statistics op (O and the row logsumexp), then the saved
    # gradient, which takes them instead of normalising the rows again
    stats = torch.ops.napkin_grad_tests.att_statistics(q.detach(), k.detach(), v.detach())
    assert [tuple(t.shape) for t in stats] == [(2, 5, 3), (2, 5)]
    lse = torch.logsumexp(torch.einsum("bqd,bxd->bqx", q, k) / 3 ** 0.5, dim=-1)
    torch.testing.assert_close(stats[1], lse.detach(), rtol=1e-5, atol=1e-6)


def test_a_tiny_attention_layer_trains_the_same_as_plain_pytorch():
    import torch                    # (here: collecting the file does not import PyTorch)
    import napkin.torch as napkin_torch
    op = napkin_torch.op(napkin.compile(ATTENTION_F64, backend="reference"), "napkin_grad_tests::layer")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 9, 8, generator=g)
    target = torch.randn(2, 9, 4, generator=g)
    init = [torch.randn(8, 4, generator=g) * 0.5 for _ in range(3)]

    def train(attend):
        ws = [w.clone().requires_grad_() for w in init]
        opt = torch.optim.SGD(ws, lr=0.1)
        losses = []
        for _ in range(4):
            opt.zero_grad()
            q, k, v = (x @ w for w in ws)
            loss = ((attend(q, k, v) - target) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return ws, losses

    ours, our_losses = train(op)
    theirs, their_losses = train(torch.nn.functional.scaled_dot_product_attention)
    assert our_losses[-1] < our_losses[0]
    torch.testing.assert_close(torch.tensor(our_losses), torch.tensor(their_losses), rtol=1e-4, atol=1e-6)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_backward_reads_the_forwards_statistics_instead_of_running_it_again():
    """The op runs its statistics forward once (O and the row logsumexp, which autograd
    keeps); the backward is the saved gradient alone, as FlashAttention's: counted at the
    dispatcher, every napkin op the forward and the backward call."""
    import torch                    # (here: collecting the file does not import PyTorch)
    import napkin.torch as napkin_torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "napkin_grad_tests":
                self.names.append(func.name().split("::")[1].split(".")[0])
            return func(*args, **(kwargs or {}))

    op = napkin_torch.op(napkin.compile(ATTENTION_F64, backend="reference"),
                         "napkin_grad_tests::once")
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(s, generator=g, requires_grad=True) for s in ((1, 4, 3), (1, 6, 3), (1, 6, 3)))
    dO = torch.randn(1, 4, 3, generator=g)
    with Calls() as calls:
        out = op(q, k, v)
        out.backward(dO)
    assert calls.names == ["once_statistics", "once_backward"]
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(q2, k2, v2).backward(dO)
    for mine, theirs in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)


TANH_LINEAR = """
axis t, m, f
in X[t m]: f32
in W[m f]: f32
Y[t f] = tanh(X * W)
out Y: f32
"""


def test_the_op_takes_any_strides():
    """A transposed input (`q.transpose(1, 2)`, everyday in PyTorch) was refused with N0903
    (`input X is not contiguous`) on the op's CPU kernel and its backward's."""
    import torch
    import napkin.torch as napkin_torch
    op = napkin_torch.op(napkin.compile(TANH_LINEAR, backend="reference"), "napkin_grad_tests::strided")
    g = torch.Generator().manual_seed(3)
    X = torch.randn(4, 3, generator=g).T.requires_grad_()          # strides (1, 3)
    W = torch.randn(5, 4, generator=g).T.requires_grad_()
    dY = torch.randn(5, 3, generator=g).T                           # a strided cotangent too
    out = op(X, W)
    out.backward(dY)
    X64, W64 = (t.detach().double().requires_grad_() for t in (X, W))
    want = torch.tanh(X64 @ W64)
    want.backward(dY.double())
    torch.testing.assert_close(out.double(), want.detach(), rtol=1e-6, atol=1e-6)
    for mine, theirs in ((X, X64), (W, W64)):
        torch.testing.assert_close(mine.grad.double(), theirs.grad, rtol=1e-5, atol=1e-6)


def test_a_double_backward_is_refused_not_silently_zero():
    """The backward op had no autograd of its own: PyTorch warned and took it as a constant,
    so a gradient penalty (create_graph=True, then backward) left W.grad None where PyTorch's
    own tanh gives a second-order term."""
    import pytest
    import torch
    import napkin.torch as napkin_torch
    op = napkin_torch.op(napkin.compile(TANH_LINEAR, backend="reference"), "napkin_grad_tests::twice")
    X = torch.randn(3, 4, requires_grad=True)
    W = torch.randn(4, 5, requires_grad=True)
    (gX,) = torch.autograd.grad(op(X, W).sum(), X, create_graph=True)   # first order: fine
    X64, W64 = (t.detach().double().requires_grad_() for t in (X, W))
    (want,) = torch.autograd.grad(torch.tanh(X64 @ W64).sum(), X64)
    torch.testing.assert_close(gX.detach().double(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="double backward"):
        (gX ** 2).sum().backward()


def test_gradients_reach_their_inputs_whatever_the_gradients_are_named():
    """The op matched the backward's outputs to inputs by name (`dX` -> X): where the forward
    already has a `dX` (an output, or an input), X's gradient is `dX_`, and backward() failed
    with a TypeError (list indices must be integers, not NoneType)."""
    import torch
    import napkin.torch as napkin_torch
    named_output = "axis r, c\nin X[r c]: f32\ndX[r c] = tanh(X)\nout dX: f32\n"
    named_input = "axis r, c\nin X[r c]: f32\nin dX[r c]: f32\nY[r c] = tanh(X) * dX\nout Y: f32\n"
    assert [s.name for s in napkin.grad(named_output).outputs] == ["dX_"]
    g = torch.Generator().manual_seed(4)
    X, dX, cot = (torch.randn(3, 5, generator=g) for _ in range(3))
    op = napkin_torch.op(napkin.compile(named_output, backend="reference"), "napkin_grad_tests::dx_out")
    X1 = X.clone().requires_grad_()
    op(X1).backward(cot)
    op = napkin_torch.op(napkin.compile(named_input, backend="reference"), "napkin_grad_tests::dx_in")
    X2, dX2 = X.clone().requires_grad_(), dX.clone().requires_grad_()
    op(X2, dX2).backward(cot)
    X64, dX64, cot64 = (t.double() for t in (X, dX, cot))
    torch.testing.assert_close(X1.grad.double(), cot64 * (1 - torch.tanh(X64) ** 2))
    torch.testing.assert_close(X2.grad.double(), cot64 * dX64 * (1 - torch.tanh(X64) ** 2))
    torch.testing.assert_close(dX2.grad.double(), cot64 * torch.tanh(X64))
