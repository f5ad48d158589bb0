"""The local rule of reverse-mode differentiation for every elementwise function.

`partials(fn, arg, value, grad)` gives, for each operand of `fn`, its contribution
to the operand's cotangent (None where no gradient flows: conditions, comparisons).
Texts are napkin expressions, fully parenthesised; `grad` is the text of the
result's cotangent. Broadcasting is by name, so a contribution may still carry axes its
operand lacks; the caller sums them away.

Conventions (written down in docs/gradients.md): `relu`, `abs`, `maximum` and
`minimum` take the derivative of the branch they choose, ties to the first operand
of `maximum`/`minimum` and to 0 for `relu`/`abs` at 0; `where` passes the cotangent
to the chosen branch only, so a NaN under a mask never reaches a gradient.
"""

from __future__ import annotations

from . import ir

LN2 = "0.6931471805599453"
SQRT_2_OVER_PI = "0.7978845608028654"   # gelu is the tanh form (runtime/elementwise.py)
GELU_CUBIC = "0.044715"


def partials(fn: str, arg, value, grad: str) -> list:
    """One thunk per operand giving its contribution's text (None: no gradient flows).

    `arg(i)` and `value()` give the texts of operand i and of the result; they are
    called only by the thunks the caller runs, so a forward value is recomputed in the
    backward only where a rule needs it.
    """
    g = grad
    if fn in ("add", "pos"):
        return [lambda: g, lambda: g][:1 if fn == "pos" else 2]
    if fn == "sub":
        return [lambda: g, lambda: f"(-{g})"]
    if fn == "neg":
        return [lambda: f"(-{g})"]
    if fn == "mul":
        return [lambda: f"({g} * {arg(1)})", lambda: f"({g} * {arg(0)})"]
    if fn == "div":
        return [lambda: f"({g} / {arg(1)})", lambda: f"(-(({g} * {arg(0)}) / ({arg(1)} * {arg(1)})))"]
    if fn in _UNARY:
        return [lambda: _UNARY[fn](arg(0), value, g)]
    if fn in ("maximum", "minimum"):
        op = ">=" if fn == "maximum" else "<="
        first = lambda: f"({arg(0)} {op} {arg(1)})"   # noqa: E731
        return [lambda: f"where({first()}, {g}, 0)", lambda: f"where({first()}, 0, {g})"]
    if fn == "where":
        return [None, lambda: f"where({arg(0)}, {g}, 0)", lambda: f"where({arg(0)}, 0, {g})"]
    if fn in ("pow", "mod"):
        return _BINARY[fn](arg, value, g)
    # comparisons, and, or, not (boolean results); floor, ceil, //, int (piecewise constant:
    # derivative 0 almost everywhere)
    return [None, None, None]


_BINARY = {
    "pow": lambda arg, y, g: [lambda: f"({g} * {arg(1)} * pow({arg(0)}, {arg(1)} - 1))",
                              lambda: f"({g} * {y()} * log({arg(0)}))"],
    # mod(a, b) = a - b * floor(a / b)
    "mod": lambda arg, y, g: [lambda: g, lambda: f"(-({g} * floor({arg(0)} / {arg(1)})))"],
}
TWO_OVER_SQRT_PI = "1.1283791670955126"


def _gelu(x: str, y, g: str) -> str:
    t = f"tanh({SQRT_2_OVER_PI} * ({x} + {GELU_CUBIC} * {x} * {x} * {x}))"
    slope = f"({SQRT_2_OVER_PI} * (1 + 3 * {GELU_CUBIC} * {x} * {x}))"
    return f"({g} * (0.5 * (1 + {t}) + 0.5 * {x} * (1 - {t} * {t}) * {slope}))"


def _silu(x: str, y, g: str) -> str:
    s = f"sigmoid({x})"
    return f"({g} * {s} * (1 + {x} * (1 - {s})))"


_UNARY = {
    "exp": lambda x, y, g: f"({g} * {y()})",
    "exp2": lambda x, y, g: f"({g} * {y()} * {LN2})",
    "log": lambda x, y, g: f"({g} / {x})",
    "log2": lambda x, y, g: f"({g} / ({x} * {LN2}))",
    "sqrt": lambda x, y, g: f"({g} * 0.5 / {y()})",
    "rsqrt": lambda x, y, g: f"({g} * (-0.5) * {y()} / {x})",
    "tanh": lambda x, y, g: f"({g} * (1 - {y()} * {y()}))",
    "sigmoid": lambda x, y, g: f"({g} * {y()} * (1 - {y()}))",
    "relu": lambda x, y, g: f"where({x} > 0, {g}, 0)",
    "abs": lambda x, y, g: f"where({x} > 0, {g}, where({x} < 0, (-{g}), 0))",
    "gelu": _gelu,
    "silu": _silu,
    "erf": lambda x, y, g: f"({g} * {TWO_OVER_SQRT_PI} * exp(-({x} * {x})))",
    "log1p": lambda x, y, g: f"({g} / (1 + {x}))",
    "expm1": lambda x, y, g: f"({g} * ({y()} + 1))",
    "sin": lambda x, y, g: f"({g} * cos({x}))",
    "cos": lambda x, y, g: f"(-({g} * sin({x})))",
    "float": lambda x, y, g: g,
}

DIFFERENTIABLE = frozenset(_UNARY) | frozenset(_BINARY) | {
    "add", "pos", "sub", "neg", "mul", "div", "maximum", "minimum", "where"}


def linear(g, fn: str, args: list[int], i: int) -> bool:
    """Whether operand i's partial is the cotangent times a constant (no NaN to gate)."""
    if fn in ("add", "sub", "neg", "pos"):
        return True
    if fn in ("mul", "div"):
        others = [a for j, a in enumerate(args) if j != i] if fn == "mul" else [args[1]]
        return all(_constant(g, a) for a in others) and (fn == "mul" or i == 0)
    return False


def _constant(g, n: int) -> bool:
    op = ir.op(g, n)
    if isinstance(op, (ir.Const, ir.SizeOf)):
        return op.value not in (0.0,) if isinstance(op, ir.Const) else True
    return isinstance(op, ir.Map) and op.fn != "div" and all(_constant(g, a) for a in ir.operands(g, n))
