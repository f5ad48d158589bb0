"""Friendly messages for the common syntax mistakes (lark's `match_examples` idea).

Each entry maps a label to example statements that fail in the same parser
state; an error that matches an example gets that entry's message and help
instead of the generic "unexpected token". lark's own `match_examples`
re-parses every example on every error (and its debug logging raises on
some states), so the examples' parser states are computed once and matched
here with the same rule: same state and same acceptable tokens, an exact
token match preferred.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from lark.exceptions import UnexpectedEOF, UnexpectedInput, UnexpectedToken

# label -> (message, help, examples)
EXAMPLES: dict[str, tuple[str, str, list[str]]] = {
    "missing_operator": (
        "missing operator between two terms",
        "napkin has no implicit multiplication: write `A * B`",
        ["Y[a] = X Z", "Y[a] = 2 X", "Y[a] = X[a] W[a]", "Y[a] = (X) (Z)", "Y[a] = exp(X) Z",
         "Y[a] = X 2", "Y[a] = sum[a](X) Z", "Y[a] = -X Z", "Y[a] = X * Z W", "Y[a] = inf X",
         # a name as a call's first argument: the state `where(a = b, ...)` fails in, whose
         # message matches its `=` token only (entries earlier here are the fallback)
         "Y[a] = f(X Z)", "Y[a] = f(X 2)"],
    ),
    "dangling_operator": (
        "an operator is missing its right-hand side",
        "finish the expression, or remove the trailing operator",
        ["Y[a] = X +", "Y[a] = X *", "Y[a] = X /", "Y[a] = X -", "Y[a] = X <", "Y[a] = X and",
         "Y[a] = X or", "Y[a] = not", "Y[a] = f(X,"],
    ),
    "double_operator": (
        "two operators in a row",
        "remove one of them (unary minus is fine: `X * -Z`)",
        ["Y[a] = X * * Z", "Y[a] = X / * Z", "Y[a] = X + * Z", "Y[a] = * X", "Y[a] = / X",
         "Y[a] = X < < Z", "Y[a] = X * / Z", "Y[a] = X and and Z"],
    ),
    "chained_comparison": (
        "comparisons do not chain",
        "write `a < b and b < c`",
        ["Y[a] = where(a < b < c, X, Z)", "Y[a] = a < b <= c", "Y[a] = a == b == c"],
    ),
    "assignment_in_expression": (
        "`=` inside an expression",
        "compare with `==`; each equation has exactly one `=`",
        ["Y[a] = where(a = b, X, Z)", "Y[a] = X = Z"],
    ),
    "missing_rhs": (
        "equation has nothing on its right-hand side",
        "write the box's expression after `=`, e.g. `Y[a b] = X * W`",
        ["Y[a] =", "Y ="],
    ),
    "empty_parens": (
        "empty parentheses",
        "put an expression inside, or remove them",
        ["Y[a] = ()", "Y[a] = X * ()"],
    ),
    "continued_line": (
        "a statement cannot start with an operator",
        "a statement ends at the end of its line unless a `(` or `[` is open: to continue an "
        "expression on the next line, open a parenthesis before the line break, "
        "`Y[a] = (X` then `* 2)`",
        ["* 2", "+ X", "/ 2", "** 2", "// 2", "and X", "or X", "< X", "== X", "<= X", ") * 2",
         "] = X", ", X"],
    ),
    "keyword_as_name": (
        "a keyword cannot be used as a name",
        "keywords are axis, in, out, group, stream, split, by, at, and, or, not, inf; rename it",
        ["in[a] = X", "out[a] = X", "axis[a] = X", "group[a] = X", "stream[a] = X", "by[a] = X",
         "split[a] = X", "axis split", "out split",
         "at[a] = X", "and[a] = X", "or[a] = X", "not[a] = X", "inf[a] = X",
         "axis in", "axis out", "axis by", "in in[a]: f16", "out in", "axis inf"],
    ),
    "unknown_statement": (
        "unknown statement",
        "statements are `axis ...`, `in X[a b]: f16`, `out Y: f16`, `group a by N`, "
        "`stream a by N`, `split a by N`, or an equation `Y[a b] = ...`",
        ["input X[a]: f16", "output Y: f16", "axes a, b", "Y X", "let Y[a] = X", "def f"],
    ),
    "missing_size": (
        "axis size missing after `=`",
        "write a positive whole number, e.g. `axis d = 64`, or leave the size out to read it from the inputs",
        ["axis d =", "axis a, d ="],
    ),
    "bad_axis_size": (
        "an axis size must be a whole number",
        "write `axis d = 64` (or `axis e = size(d)`: as large as `d`); sizes cannot be "
        "other expressions",
        ["axis d = x", "axis d = 2 * 32", "axis d = (64)", "axis d = inf", "group q by x",
         "stream x by 2 * 32", "group q by", "stream x by"],
    ),
    "input_without_axes": (
        "an input needs its axes in brackets",
        "write `in X[a b]: f16` (use `in X[]: f32` for a scalar)",
        ["in X: f16", "in X", "in X, Y"],
    ),
    "missing_dtype_after_colon": (
        "dtype missing after `:`",
        "dtypes are f32, f16, bf16, i32, i64 (and bool for an input)",
        ["in X[a]:", "out Y:", "in X[a]: ,"],
    ),
    "missing_by": (
        "a schedule hint needs `by` and a size",
        "write `group q by 128`, `stream x by 64` (optionally followed by `at LEVEL`) or "
        "`split x by 8`",
        ["group q 128", "stream x 64", "group q", "stream x", "group q = 128"],
    ),
    "bad_axis_list": (
        "only axis names may appear between brackets",
        "write the axes separated by spaces, e.g. `X[a b]`; a computed position (a gather) goes "
        "in parentheses: `X[a (b + 1)]`, `X[(0) b]`",
        ["Y[a] = X[0]", "Y[a] = X[a, b]", "Y[a, b] = X", "in X[a, b]: f16", "Y[a] = X[a + 1]",
         "Y[a] = X[a b + 1]", "Y[a] = X[a 0]", "Y[a] = X[a b - 1]", "Y[a] = X[a b * 2]",
         "Y[a] = sum[a, b](X)", "Y[1] = X"],
    ),
}


# Display names of terminals, for "expected one of" lists.
TERMINALS: dict[str, str] = {
    "AXIS": "`axis`", "IN": "`in`", "OUT": "`out`", "GROUP": "`group`", "STREAM": "`stream`", "SPLIT": "`split`",
    "BY": "`by`", "AT": "`at`", "AND": "`and`", "OR": "`or`", "NOT": "`not`", "INF": "`inf`",
    "NAME": "a name", "NUMBER": "a number", "COMPARE": "a comparison", "PLUS": "`+`",
    "MINUS": "`-`", "STAR": "`*`", "POW": "`**`", "FLOORDIV": "`//`", "SLASH": "`/`", "_EQUAL": "`=`", "_COLON": "`:`",
    "_COMMA": "`,`", "_LPAR": "`(`", "_RPAR": "`)`", "_LSQB": "`[`", "_RSQB": "`]`",
    "$END": "the end of the statement",
}


def describe_expected(expected) -> str:
    names = sorted({TERMINALS.get(t, t) for t in expected})
    if not names:
        return ""
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _key(exc: UnexpectedInput):
    state = getattr(exc, "state", None)
    if state is None or not hasattr(state, "state_stack"):
        return None
    return len(state.state_stack), state.position


@lru_cache(maxsize=4)
def _index(parse: Callable) -> tuple:
    entries = []
    for label, (_, _, examples) in EXAMPLES.items():
        for text in examples:
            try:
                parse(text)
            except (UnexpectedToken, UnexpectedEOF) as exc:
                token = getattr(exc, "token", None)
                entries.append((label, _key(exc), frozenset(getattr(exc, "accepts", ()) or ()),
                                (token.type, token.value) if token is not None else None))
            else:  # pragma: no cover - a parsing example is a bug in EXAMPLES
                raise AssertionError(f"syntax example parses: {text!r}")
    return tuple(entries)


def match(exc: UnexpectedInput, parse: Callable) -> str | None:
    """The label of the example failing like `exc`, or None."""
    key = _key(exc)
    if key is None or not isinstance(exc, (UnexpectedToken, UnexpectedEOF)):
        return None
    accepts = frozenset(getattr(exc, "accepts", ()) or ())
    token = getattr(exc, "token", None)
    token = (token.type, token.value) if token is not None else None
    candidate = None
    for label, ex_key, ex_accepts, ex_token in _index(parse):
        if ex_key != key or ex_accepts != accepts:
            continue
        if ex_token == token:
            return label
        candidate = candidate or label
    return candidate
