"""svg.escape and svg.quoteattr write what xml.sax.saxutils writes (imported here only)."""

from __future__ import annotations

from xml.sax import saxutils

from hypothesis import given, strategies as st

from napkin.draw import svg

TEXT = st.text(st.sampled_from(list("ab &<>\"'\n\r\t;#x")) | st.characters(), max_size=40)


@given(TEXT)
def test_escape_is_saxutils(text):
    assert svg.escape(text) == saxutils.escape(text)


@given(TEXT)
def test_quoteattr_is_saxutils(text):
    assert svg.quoteattr(text) == saxutils.quoteattr(text)


def test_quotes_of_both_kinds():
    for text in ['say "hi"', "it's", "it's \"both\"", "", "a\tb\nc\rd & <e>"]:
        assert svg.quoteattr(text) == saxutils.quoteattr(text)
