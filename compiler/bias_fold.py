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
1429 -> 764 instructions, 44.7 -> 23.9 a score (the slope's powf had stayed in the loop).
The other forms a diagram may write fold the same (`biased`): the bias subtracted
(`X * c - a * p`: t = fma(-a / c, p, X)), the slope a divisor (`p / a`: 1 / (a c)), the
scale outside the sum (`(X + B) / c`, `(X - B) * c`: t = X ± B, the exponent takes c):
ALiBi so written, 1492, 1427 and 2329 -> 764-766 instructions (the same plan, static SASS).
Not folded: the scale outside the mask (`where(m, X + B, -inf) / c`)."""

from __future__ import annotations

from . import ir, monotone


def _through(g, n: int) -> int:
    while isinstance(ir.op(g, n), ir.Assign):
        n = ir.operands(g, n)[0]
    return n


def split(g, n: int) -> tuple[int, int, str] | None:
    """(Y, c, "mul" or "div") where n (through names) is `Y * c`, `c * Y` or `Y / c` with c a
    positive scalar and Y not one, else None."""
    n = _through(g, n)
    op = ir.op(g, n)
    if not isinstance(op, ir.Map) or op.fn not in ("mul", "div"):
        return None
    y, c = ir.operands(g, n)
    if op.fn == "mul" and monotone.positive_scalar(g, y) and not monotone.positive_scalar(g, c):
        y, c = c, y
    if monotone.positive_scalar(g, y) or not monotone.positive_scalar(g, c):
        return None
    return y, c, op.fn


def _contraction(g, n: int) -> bool:
    return isinstance(ir.op(g, _through(g, n)), ir.Contract)


def scaled(g, n: int) -> bool:
    """Whether n (through names) is `X * c` or `X / c` (c a positive scalar, either side of
    the product) with X a contraction: the softmax scale the exponent folds."""
    found = split(g, n)
    return found is not None and _contraction(g, found[0])


def _summed(g, n: int, term) -> tuple[int, int, int, int] | None:
    """(the sum, its term T, the bias B, +1 or -1) where n is `T + B`, `B + T` or `T - B`
    with term(T), else None."""
    n = _through(g, n)
    op = ir.op(g, n)
    if op not in (ir.Map("add"), ir.Map("sub")):
        return None
    a, b = ir.operands(g, n)
    for x, bias in ((a, b), (b, a)) if op.fn == "add" else ((a, b),):
        if term(x):
            return n, _through(g, x), bias, 1 if op.fn == "add" else -1
    return None


def biased(g, n: int) -> tuple[int, int, int, bool, int] | None:
    """(the sum, the scale, the bias B, whether B is under the scale, B's sign) where n
    (through names) is the scaled scores with a bias in one of the forms the language writes
    for it: `X * c + B` (either order) or `X * c - B`, where the kernel keeps t = X ± B / c,
    or `(X + B) * c`, `(X - B) / c`, ..., where it keeps t = X ± B; c a positive scalar, X a
    contraction. Else None."""
    beside = _summed(g, n, lambda x: scaled(g, x))
    if beside is not None:
        total, scale, bias, sign = beside
        return total, scale, bias, False, sign
    outer = split(g, n)
    under = outer and _summed(g, outer[0], lambda x: _contraction(g, x))
    if under:
        total, _, bias, sign = under
        return total, _through(g, n), bias, True, sign
    return None


def factor(g, bias: int, stream: str | None) -> tuple[int, int, str] | None:
    """(a, p, "mul" or "div") where the bias is the float product `a * p` (either order) or
    quotient `p / a` and a reads no axis p reads nor the streamed axis (a / c, or 1 / (a c),
    then holds per block of rows: ALiBi's slope per head), else None."""
    bias = _through(g, bias)
    op = ir.op(g, bias)
    if op not in (ir.Map("mul"), ir.Map("div")) or \
            ir.kind_of_dtype(ir.type_of(g, bias).dtype) != "float":
        return None
    pairs = (tuple(reversed(ir.operands(g, bias))),) if op.fn == "div" else \
        (tuple(ir.operands(g, bias)), tuple(reversed(ir.operands(g, bias))))
    for a, p in pairs:
        axes = set(ir.type_of(g, a).axes)
        if not axes & set(ir.type_of(g, p).axes) and stream not in axes:
            return a, p, op.fn
    return None


def folded(g, scale: int | None, found, stream: str | None) -> frozenset:
    """The ops the exponent's FFMA and the bias's fold leave no instruction of their own: the
    scale, and the bias's product or quotient (`factor`) where `found` (masking.scores_bias)
    has one; the scores' sum stays (its FFMA)."""
    if scale is None:
        return frozenset()
    product = found is not None and factor(g, found[2], stream) is not None
    return frozenset({scale} | ({_through(g, found[2])} if product else set()))


def positions(g, scale: int | None, found, stream: str | None) -> frozenset:
    """The operand p of the bias's product `folded` leaves (ALiBi's `x - q`), through names:
    t's FFMA reads it converted to float (issue.FLASH_BIAS_INDEX)."""
    product = scale is not None and found is not None and factor(g, found[2], stream)
    return frozenset({_through(g, product[1])}) if product else frozenset()


def lowered(g, found, scale: int | None, folded: frozenset, stream: str):
    """(the sum, B, B's (a, p, fn) where Model.folded holds B's product, else None, whether B
    is under the scale, its sign) of the scores' bias `found` (masking.scores_bias) over the
    folded scale (`scale`, the lowering's: Model.scale), or None."""
    if scale is None or found is None or found[1] != scale:
        return None
    total, _, bias, inside, sign = found
    return total, bias, factor(g, bias, stream) if _through(g, bias) in folded else None, \
        inside, sign
