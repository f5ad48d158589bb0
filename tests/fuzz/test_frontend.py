"""The front end on hostile input: statements generated from the grammar must parse (or fail
only on a limit), random text and bytes, nesting to 50,000, 10 MB files, 100,000 equations:
only NapkinError may escape, and every input answers within a bound."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from .frontend import (BYTES, FRAGMENT_SOUP, PREAMBLE, SOUP, TEXT, TIME_BOUND_S, escape, grammar_statements,
                       huge_inputs, syntax_error, timed_escape)
from .injection import cli

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))


def budget(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


@budget(600)
@given(grammar_statements())
def test_grammar_statements_parse(statement):
    assert syntax_error(statement) is None, statement
    assert escape(PREAMBLE + statement) is None, statement


@budget(3000)
@given(SOUP)
def test_token_soup(text):
    assert escape(text) is None


@budget(2500)
@given(FRAGMENT_SOUP)
def test_fragment_soup(text):
    assert escape(text) is None


@budget(1500)
@given(TEXT)
def test_random_text(text):
    assert escape(text) is None


@budget(2000)
@given(BYTES)
def test_random_bytes(data):
    assert escape(data) is None


HUGE = huge_inputs()


@pytest.mark.parametrize("name", list(HUGE))
def test_huge_inputs_answer_in_time(name):
    found, seconds = timed_escape(HUGE[name])
    assert found is None, found
    assert seconds < TIME_BOUND_S, f"{name} took {seconds:.1f} s"


def test_a_10_mb_file_through_the_command_line(tmp_path):
    path = tmp_path / "big.napkin"
    path.write_bytes(b"axis a\n" + b"#" * 10_000_000)
    status, _, err = cli(["check", str(path)])
    assert status == 1 and "N0501" in err
