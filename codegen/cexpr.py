"""C spellings of the language's functions, operators, dtypes and numbers.

Data, not logic: the lowering looks things up here and formats numbers with
`float_literal`, so templates and the lowering never invent C text of their own.
"""

from __future__ import annotations

import math

import numpy as np

CTYPE = {"f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "i32": "int",
         "i64": "long long", "bool": "bool"}
# The C type a value of each kind is computed in (docs/language.md: integers in 64 bits).
CKIND = {"float": "float", "int": "long long", "bool": "bool"}
# How a stored element of each kind becomes a value, and a value a stored element.
LOAD = {"float": "napkin_to_float", "int": "napkin_to_int", "bool": "napkin_to_bool"}
STORE = {"float": "napkin_from_float", "int": "napkin_from_int", "bool": "napkin_from_float"}

# fn -> format string over the argument expressions {0}, {1}, {2}
MAP = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "neg": "(-{0})",
    "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})",
    "and": "({0} && {1})", "or": "({0} || {1})", "not": "(!{0})",
    "exp": "expf({0})", "exp2": "exp2f({0})", "log": "logf({0})", "log2": "log2f({0})",
    "sqrt": "sqrtf({0})", "rsqrt": "(1.0f / sqrtf({0}))", "tanh": "tanhf({0})",
    "sigmoid": "napkin_sigmoid({0})", "relu": "napkin_relu({0})", "gelu": "napkin_gelu({0})",
    "silu": "napkin_silu({0})", "abs": "fabsf({0})",
    "maximum": "napkin_max({0}, {1})", "minimum": "napkin_min({0}, {1})",
    "where": "({0} ? {1} : {2})",
    "erf": "erff({0})", "log1p": "log1pf({0})", "expm1": "expm1f({0})", "sin": "sinf({0})",
    "cos": "cosf({0})", "floor": "napkin_to_int(floorf({0}))", "ceil": "napkin_to_int(ceilf({0}))", "mod": "napkin_mod({0}, {1})",
    "pow": "powf({0}, {1})",
    "floordiv": "napkin_floordiv({0}, {1})", "float": "((float)({0}))", "int": "napkin_to_int({0})",
}
# exp as 2^(x log2 e) on the special-function unit (ex2.approx.ftz: an FMUL and a MUFU.EX2
# where expf is a range reduction of some eight instructions), relative error ~2^-22: for
# values rounded to 16 bits next (codegen/chain.py's operands of a product)
FAST = {"exp": "napkin_ex2(({0}) * 1.442695f)"}


def shifted_exp(arg: str) -> str:
    """exp of an argument shifted by its row's max (`x - m <= 0`: a softmax's and a
    logsumexp's terms and their rescaling factors) as FAST's 2^(x log2 e): within the
    tolerance rule's exp (runtime/bound.py: 4 u of its own and |x| u from x log2 e, small
    where e^x is not), -inf -> 0 and NaN -> NaN as expf; an FMUL and a MUFU.EX2 a value
    where IEEE expf issues some nine instructions (compiler/issue.py's "exp")."""
    return FAST["exp"].format(arg)
# Where an integer argument changes the C spelling (the others are overloaded or operators).
# + - * and negation of integers wrap around (napkin_iadd: signed overflow is undefined in C++)
INT_MAP = {"abs": "napkin_abs({0})", "floor": "({0})", "ceil": "({0})",
           "add": "napkin_iadd({0}, {1})", "sub": "napkin_isub({0}, {1})",
           "mul": "napkin_imul({0}, {1})", "neg": "napkin_ineg({0})"}

BOOL_RESULT = {"lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not"}

# Reductions: initial value and the combine of the running value with one element.
REDUCE_INIT = {"sum": "0.0f", "max": "-NAPKIN_INF", "min": "NAPKIN_INF"}
REDUCE_STEP = {"sum": "({acc} + {v})", "max": "napkin_max({acc}, {v})",
               "min": "napkin_min({acc}, {v})"}
SCAN_INIT = {"cumsum": "0.0f", "cumprod": "1.0f"}
SCAN_STEP = {"cumsum": "({acc} + {v})", "cumprod": "({acc} * {v})"}
ARG_INIT = {"argmax": "-NAPKIN_INF", "argmin": "NAPKIN_INF"}   # with no position yet
LANES = {"sum": "napkin_lanes_sum", "max": "napkin_lanes_max", "min": "napkin_lanes_min"}


def float_literal(value: float) -> str:
    """A C float literal for any float, including inf and nan.

    The value is rounded to f32 first (kernels compute in f32): a constant beyond the f32
    range is an infinity and one below it 0, never a literal NVRTC rejects as out of range."""
    if math.isnan(value):
        return "NAPKIN_NAN"
    with np.errstate(over="ignore", under="ignore"):
        value = float(np.float32(value))
    if math.isinf(value):
        return "NAPKIN_INF" if value > 0 else "(-NAPKIN_INF)"
    text = str(np.float32(value))       # the shortest text that reads back as this f32
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f" if "e" in text or "." in text else text + ".0f"


def int_literal(value: int) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(value)
    return str(value) if -2**31 <= value < 2**31 else f"{value}LL"
