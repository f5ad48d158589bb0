"""An additive bias beside attention's softmax scale, folded into the exponent as
FlashAttention-2 folds ALiBi: `S = X * c + B` (X the contraction, c a positive scalar) keeps
its scores unscaled in the fragments, t = X + B / c, one FFMA per score (the row maximum of
t orders as S's: c > 0), and the softmax's exponent takes c with log2(e) in its one FFMA,
2^(t c log2 e - m c log2 e), as the unbiased kernel (masking.scores_scale, codegen/flash.py).
A bias that is a product `a * p` (ALiBi's slope times `x - q`) divides its factor a rather
than the product: t = fma(a / c, p, X), where a / c is one value per block of rows when a
reads none of the positions p reads nor the streamed axis (the slope, per head; declared
once a block by the lowering): the product's FMUL per score is gone. ALiBi's main loop
(library diagram, h100 plan at b = 4, h = 16, q = x = 4096; sm_90, static SASS, NVRTC 13):
1429 -> 764 instructions, 44.7 -> 23.9 a score (the slope's powf had stayed in the loop)."""

from __future__ import annotations

from . import ir, monotone


def _through(g, n: int) -> int:
    while isinstance(ir.op(g, n), ir.Assign):
        n = ir.operands(g, n)[0]
    return n


def scaled(g, n: int) -> bool:
    """Whether n (through names) is `X * c` or `X / c` (c a positive scalar, either side of
    the product) with X a contraction: the softmax scale the exponent folds."""
    n = _through(g, n)
    op = ir.op(g, n)
    if not isinstance(op, ir.Map) or op.fn not in ("mul", "div"):
        return False
    a, c = ir.operands(g, n)
    if op.fn == "mul" and not isinstance(ir.op(g, _through(g, a)), ir.Contract):
        a, c = c, a
    return isinstance(ir.op(g, _through(g, a)), ir.Contract) and monotone.positive_scalar(g, c)


def biased(g, n: int) -> tuple[int, int, int] | None:
    """(the sum, its scaled scores `X * c`, the bias B) where n (through names) is
    `X * c + B` in either order, else None."""
    n = _through(g, n)
    if ir.op(g, n) != ir.Map("add"):
        return None
    a, b = ir.operands(g, n)
    for x, bias in ((a, b), (b, a)):
        if scaled(g, x):
            return n, _through(g, x), bias
    return None


def factor(g, bias: int, stream: str | None) -> tuple[int, int] | None:
    """(a, p) where the bias is the float product `a * p` and a reads no axis p reads nor
    the streamed axis (a / c then holds per block of rows: ALiBi's slope per head), else
    None."""
    bias = _through(g, bias)
    if ir.op(g, bias) != ir.Map("mul") or \
            ir.kind_of_dtype(ir.type_of(g, bias).dtype) != "float":
        return None
    for a, p in (tuple(ir.operands(g, bias)), tuple(reversed(ir.operands(g, bias)))):
        axes = set(ir.type_of(g, a).axes)
        if not axes & set(ir.type_of(g, p).axes) and stream not in axes:
            return a, p
    return None


def folded(g, scale: int | None, found, stream: str | None) -> frozenset:
    """The ops the exponent's FFMA and the bias's fold leave no instruction of their own: the
    scale, and the bias's product (`factor`) where `found` (masking.scores_bias) has one; the
    scores' sum stays (its FFMA)."""
    if scale is None:
        return frozenset()
    product = found is not None and factor(g, found[2], stream) is not None
    return frozenset({scale} | ({_through(g, found[2])} if product else set()))


def lowered(g, found, scale: int | None, folded: frozenset, stream: str):
    """(the sum X * c + B, B, B's (a, p) where Model.folded holds B's product, else None) of
    the scores' bias `found` (masking.scores_bias) over the folded scale (`scale`, the
    lowering's: Model.scale), or None."""
    if scale is None or found is None or found[1] != scale:
        return None
    total, _, bias = found
    return total, bias, factor(g, bias, stream) if _through(g, bias) in folded else None
