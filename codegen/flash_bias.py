"""The C text of a bias folded beside attention's softmax scale (compiler/bias_fold.py): the
scores stay unscaled in the fragments and each takes its bias in one FMA, t = X ± B / c
where the bias is beside the scale (`X * c + B`), t = X ± B where it is under it
(`(X + B) / c`); a bias `a * p` or `p / a` with a per block of rows (ALiBi's slope per
head) has its coefficient declared once a block (`qka`), its FMA reading p converted."""

from __future__ import annotations

from ..compiler import ir
from . import program as P


def coefficient(a: str, fn: str, under: bool, sign: int) -> str:
    """The C factor of a bias `a * p` or `p / a` in t's FMA: over the scale (qki) where the
    bias is beside it, negated where subtracted."""
    minus = "" if sign > 0 else "-"
    a = a if a.isidentifier() else f"({a})"
    if fn == "div":
        return f"{minus}{'1.0f' if under else 'qki'} / {a}"
    return f"{minus}{a}" + ("" if under else " * qki")


def declare(lowering, bias: tuple, batch) -> tuple:
    """Before the key loop: the scale's reciprocal `qki` where the bias is beside it, and the
    product's coefficient `qka` where its factor reads only the block's batch axes; the
    bias (bias_fold.lowered) with `qka` for its factor there."""
    total, node, product, under, sign = bias
    if not under:
        lowering.b.emit(P.Decl("const float", "qki", lowering.scaled[2]))
    if product is not None and set(ir.type_of(lowering.g, product[0]).axes) <= set(batch):
        a = lowering.emitter.value(product[0], lowering._point({})[0])
        lowering.b.emit(P.Decl("const float", "qka", coefficient(a, product[2], under, sign)))
        product = ("qka",) + product[1:]
    return total, node, product, under, sign


def score(lowering, bias: tuple, scope: dict) -> str:
    """t at the score `sc[i0][i1][i2]` of `scope`."""
    _, node, product, under, sign = bias
    value = lowering.emitter.value
    if product is not None:
        a = product[0] if product[0] == "qka" else \
            coefficient(value(product[0], scope), product[2], under, sign)
        return f"fmaf({a}, (float)({value(product[1], scope)}), sc[i0][i1][i2])"
    if under:
        return f"(sc[i0][i1][i2] {'+' if sign > 0 else '-'} (float)({value(node, scope)}))"
    return f"fmaf((float)({value(node, scope)}), {'' if sign > 0 else '-'}qki, sc[i0][i1][i2])"
