"""No input of any kind makes the front end raise anything but NapkinError.

10,000 generated inputs per CI run: random text built from the language's own
tokens, random Unicode text and random bytes.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import napkin
from napkin.diagrams.codes import CODES
from napkin.diagrams.diagnostics import NapkinError, Source

TOKENS = ["axis", "in", "out", "group", "stream", "by", "at", "a", "b", "x", "q", "d", "X", "Y",
          "W", "S", "[", "]", "(", ")", ",", ":", "=", "==", "<", "<=", "+", "-", "*", "/", "and",
          "or", "not", "inf", "64", "0", "1e999", "-1", ".5", "f16", "f32", "bf16", "sum", "max",
          "softmax", "exp", "where", "size", "#", "\n", " ", "\t", "\x00", "é", "$"]
FRAGMENTS = ["axis a, b = 4, x\n", "in X[a b]: f32\n", "in W[b x]: f16\n", "Y[a x] = X * W\n",
             "out Y: f32\n", "Z[a] = sum[b](X)\n", "group a by 2\n", "P[a b] = softmax[b](X)\n",
             "M[a b] = where(a <= b, X, -inf)\n", "T[b a] = X[b a]\n", "out Z: f16\n"]


def budget(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck),
                    database=None)


def only_napkin_errors(text_or_bytes) -> None:
    """Parse and check; a NapkinError is fine, anything else fails the test."""
    try:
        if isinstance(text_or_bytes, bytes):
            napkin.load(text_or_bytes)
        else:
            napkin.load(Source("<fuzz>", text_or_bytes))
    except NapkinError as exc:
        assert exc.diagnostics and all(d.code in CODES for d in exc.diagnostics)


@budget(4000)
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_token_soup(text):
    only_napkin_errors(text)


@budget(2500)
@given(st.lists(st.sampled_from(FRAGMENTS + TOKENS), max_size=25).map("".join))
def test_fragment_soup(text):
    only_napkin_errors(text)


@budget(1500)
@given(st.text(max_size=200))
def test_random_text(text):
    only_napkin_errors(text)


@budget(2000)
@given(st.binary(max_size=200))
def test_random_bytes(data):
    only_napkin_errors(data)
