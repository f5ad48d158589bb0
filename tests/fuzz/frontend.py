"""Front-end inputs: statements generated from the grammar, random text and bytes, and
huge inputs (nesting to 50,000, 10 MB files, 100,000 equations).

Only `NapkinError` may escape `napkin.load`, and every input answers within a bound.
"""

from __future__ import annotations

import time
from functools import lru_cache

from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark
from lark import Lark

import napkin
from napkin.diagrams.codes import CODES
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.parser import GRAMMAR_PATH, parse

from .timeouts import CaseTimeout

# names the preamble declares, so that many generated statements also check
POOL = ["a", "b", "x", "X", "Y", "W", "f16", "f32", "bf16", "exp", "sum", "softmax", "where",
        "size", "max", "registers", "q_1", "_"]
PREAMBLE = "axis a, b = 4, x\nin X[a b]: f32\nin W[b x]: f16\n"
KEYWORDS = {"axis", "in", "out", "group", "stream", "by", "at", "and", "or", "not", "inf"}
# statement-level syntax the grammar admits but the checks refuse: limits and huge numbers
LIMIT_CODES = {"N0502", "N0504", "N0505"}
TIME_BOUND_S = 20.0      # any single front-end input (CI machines are slow; typical < 2 s)


def _spaced(s):
    return s.map(lambda t: f" {t} ")


@lru_cache(maxsize=1)
def _grammar() -> Lark:
    return Lark(GRAMMAR_PATH.read_text(), parser="lalr", lexer="basic")


def grammar_statements():
    """One statement drawn from the grammar of `diagrams/napkin.lark` (tokens spaced)."""
    name = st.one_of(st.sampled_from(POOL),
                     st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
                     .filter(lambda t: t not in KEYWORDS))
    number = st.from_regex(r"([0-9]{1,4}(\.[0-9]{0,3})?|\.[0-9]{1,3})([eE][+-]?[0-9]{1,3})?",
                           fullmatch=True)
    explicit = {"NAME": _spaced(name), "NUMBER": _spaced(number),
                "WS": st.sampled_from([" ", "\t", "  "]), "COMMENT": st.just(" ")}
    for kw in KEYWORDS:
        explicit[kw.upper()] = st.just(f" {kw} ")
    return from_lark(_grammar(), explicit=explicit)


def escape(data) -> str | None:
    """None when `napkin.load` answers or raises NapkinError with known codes; else what escaped."""
    try:
        if isinstance(data, bytes):
            napkin.load(data)
        else:
            napkin.load(Source("<fuzz>", data))
    except NapkinError as exc:
        bad = [d.code for d in exc.diagnostics if d.code not in CODES]
        if not exc.diagnostics or bad:
            return f"NapkinError with unknown codes {bad}"
    except CaseTimeout:           # the fuzz run's limit on the case, not the front end's
        raise
    except BaseException as exc:  # noqa: BLE001 - anything else is what this test looks for
        return f"{type(exc).__name__}: {exc}"[:500]
    return None


def syntax_error(statement: str) -> str | None:
    """None when a grammar statement parses (or fails only on a limit); else the error."""
    try:
        parse(Source("<grammar>", statement))
    except NapkinError as exc:
        codes = {d.code for d in exc.diagnostics}
        if codes <= LIMIT_CODES:
            return None
        return str(exc)[:500]
    return None


def _deep(n: int) -> dict:
    head, tail = "axis a\nin X[a]: f32\n", "\nout Y: f32\n"
    return {
        "parentheses": head + "Y[a] = " + "(" * n + "X" + ")" * n + tail,
        "unary minus": head + "Y[a] = " + "-" * n + "X" + tail,
        "not": head + "Y[a] = where(" + "not " * n + "(X > 0), X, X)" + tail,
        "calls": head + "Y[a] = " + "exp(" * n + "X" + ")" * n + tail,
        "reductions": head + "Y[] = " + "sum[a](" * n + "X" + ")" * n + tail,
        "brackets": head + "Y[a] = X" + "[" * n + "]" * n + tail,
        "unclosed": head + "Y[a] = " + "(" * n + tail,
        "left-deep sum": head + "Y[a] = X" + " + X" * n + tail,
        "products": head + "Y[a] = X" + "*X" * n + tail,
        "comparisons": head + "Y[a] = where(X > 0" + " and X > 0" * n + ", X, X)" + tail,
    }


def huge_inputs(depth: int = 50_000, count: int = 100_000) -> dict:
    """Name -> text or bytes: nesting to 50,000 (or `depth`), 10 MB files, 100,000 (or `count`)
    equations and axes, long names."""
    out = {f"nested {depth:,} deep: {k}": v for k, v in _deep(depth).items()}
    ten = 10_000_000
    out.update({
        "10 MB comment": "axis a\n# " + "x" * ten + "\n",
        "10 MB of bytes": b"axis a\n" + b"\xff" * ten,
        "10 MB name": "axis " + "a" * ten,
        "10 MB number": "axis a = " + "9" * ten,
        "10 MB one line of tokens": "axis a\nin X[a]: f32\nY[a] = X" + " + X" * (ten // 4),
        f"{count:,} equations (14 bytes each)": "axis a\nin X[a]: f32\n" + "".join(
            f"E{i}[a] = X\n" for i in range(count)) + "out E0: f32\n",
        f"{count:,} equations (4 bytes each)": "Y=X\n" * count,
        f"{count:,} axes in one declaration": "axis " + ", ".join(f"a{i}" for i in range(count)),
        "1 MiB number": "axis a = " + "9" * ((1 << 20) - 20),
        "1 MiB of newlines": "\n" * ((1 << 20) - 1),
        "1 MiB of open brackets": "Y[a] = " + "[" * ((1 << 20) - 10),
        "9,990 equations": "axis a\nin X[a]: f32\n" + "".join(
            f"E{i}[a] = X\n" for i in range(9_990)) + "out E0: f32\n",
    })
    return out


def timed_escape(data) -> tuple[str | None, float]:
    t0 = time.perf_counter()
    found = escape(data)
    return found, time.perf_counter() - t0


TEXT = st.text(st.characters(codec="utf-8"), max_size=300)
BYTES = st.binary(max_size=300)
TOKENS = ["axis", "in", "out", "group", "stream", "by", "at", "a", "b", "x", "X", "Y", "[", "]",
          "(", ")", ",", ":", "=", "<", "<=", "+", "-", "*", "/", "and", "not", "inf", "64", "0",
          "1e999", "nan", "-1", ".5", "f16", "bf16", "sum", "max", "softmax", "exp", "where",
          "size", "#", "\n", " ", "\t", "\x00", "\u202e", "\ufeff", "\u0430", "\u00a0",
          "\U0001f600", "\ud800", "*/", "/*", "\"", "'", "\\"]
SOUP = st.lists(st.sampled_from(TOKENS), max_size=80).map(" ".join)
# whole statements shuffled with tokens: reaches the checks more often than token soup
FRAGMENTS = ["axis a, b = 4, x\n", "in X[a b]: f32\n", "in W[b x]: f16\n", "Y[a x] = X * W\n",
             "out Y: f32\n", "Z[a] = sum[b](X)\n", "group a by 2\n", "P[a b] = softmax[b](X)\n",
             "M[a b] = where(a <= b, X, -inf)\n", "T[b a] = X[b a]\n", "out Z: f16\n",
             "in V[a], U[b]: bf16\n", "out Y, Z: f32\n", "stream b by 3 at smem\n"]
FRAGMENT_SOUP = st.lists(st.sampled_from(FRAGMENTS + TOKENS), max_size=25).map("".join)
