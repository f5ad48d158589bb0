"""The parser: statements, spans, continuation lines, several errors per run, limits."""

from __future__ import annotations

import time

import pytest

from napkin.diagrams import ast, parser
from napkin.diagrams.diagnostics import NapkinError, Source
from napkin.diagrams.sources import library_names, library_source
from napkin.diagrams.split import split_statements


def parse(text: str) -> ast.Program:
    return parser.parse(Source("t.napkin", text))


def errors(text: str) -> list:
    with pytest.raises(NapkinError) as exc:
        parse(text)
    return list(exc.value.diagnostics)


@pytest.mark.parametrize("name", library_names())
def test_library_parses(name):
    program = parser.parse(library_source(name))
    assert any(isinstance(s, ast.Equation) for s in program.statements)


def test_statement_kinds_and_spans():
    text = "axis a, d = 64\nin X[a d]: f16, W[d]: bf16\nY[a] = X * W\nout Y: f32\ngroup a by 32 at smem\n"
    p = parse(text)
    kinds = [type(s).__name__ for s in p.statements]
    assert kinds == ["AxisDecl", "InputDecl", "Equation", "OutputDecl", "Hint"]
    axis = p.statements[0]
    assert [i.name.text for i in axis.items] == ["a", "d"] and axis.items[1].size.text == "64"
    eq = p.statements[2]
    assert (eq.span.line, eq.span.col, eq.span.end_col) == (3, 1, 13)
    assert isinstance(eq.expr, ast.BinOp) and eq.expr.op == "*"
    assert text[eq.expr.op_span.start:eq.expr.op_span.end] == "*"
    hint = p.statements[4]
    assert (hint.kind, hint.axis.text, hint.size.text, hint.level.text) == ("group", "a", "32", "smem")


def test_spans_slice_the_source_exactly():
    text = "axis a\nin X[a]: f32\n  Y[a] = exp(X) * 2  # comment\nout Y: f32\n"
    p = parse(text)
    eq = p.statements[2]
    assert text[eq.span.start:eq.span.end] == "Y[a] = exp(X) * 2"
    call = eq.expr.left
    assert text[call.span.start:call.span.end] == "exp(X)"
    assert (call.span.line, call.span.col) == (3, 10)


def test_precedence():
    p = parse("axis a\nY[a] = -a * 2 + 3 < 4 and not 1 > 2 or a == 0\n")
    e = p.statements[1].expr
    assert e.op == "or" and e.left.op == "and" and e.left.left.op == "<"
    assert e.left.left.left.op == "+" and e.left.left.left.left.op == "*"
    assert isinstance(e.left.left.left.left.left, ast.UnOp)
    assert isinstance(e.left.right, ast.UnOp) and e.left.right.op == "not"


def test_newlines_inside_brackets_continue_a_statement():
    text = "axis a\nin X[a]: f32\nY[a] = maximum(X,\n    X * 2) + (X\n  - 1)\nout Y: f32\n"
    p = parse(text)
    assert len(p.statements) == 4
    eq = p.statements[2]
    assert (eq.span.line, eq.span.end_line) == (3, 5)


def test_unclosed_bracket_does_not_swallow_the_file():
    errs = errors("axis a\nin X[a]: f32\nY[a] = exp(X\nZ[a] = X +\nout Y: f32\n")
    assert [(e.code, e.span.line) for e in errs] == [("N0103", 3), ("N0103", 4)]


def test_several_errors_in_one_run():
    errs = errors("axis a\nY[a] = X Z\nW[a] = $\nin X: f16\nV[a] = (1\n")
    assert [e.span.line for e in errs] == [2, 3, 4, 5]
    assert [e.code for e in errs] == ["N0102", "N0101", "N0102", "N0103"]


@pytest.mark.parametrize("text, message", [
    ("Y[a] = X Z", "missing operator"),
    ("Y[a] = X +", "missing its right-hand side"),
    ("Y[a] = X * * Z", "two operators in a row"),
    ("Y[a] = a < b < c", "do not chain"),
    ("Y[a] = where(a = b, X, Z)", "`=` inside an expression"),
    ("Y[a] =", "nothing on its right-hand side"),
    ("Y[a] = ()", "empty parentheses"),
    ("in[a] = X", "keyword"),
    ("input X[a]: f16", "unknown statement"),
    ("axis d =", "size missing"),
    ("axis d = x", "whole number"),
    ("in X: f16", "axes in brackets"),
    ("in X[a]:", "dtype missing"),
    ("group q 128", "`by` and a size"),
    ("Y[a] = X[a, b]", "only axis names"),
])
def test_friendly_syntax_messages(text, message):
    (err,) = errors(text)
    assert message in err.message, err.message
    assert err.help


@pytest.mark.parametrize("text, message, col", [
    # the examples' parser states are a top-level read's: nested, the same mistakes fell to
    # "unexpected `+`, expected `(`, `[`, `]` or a name"
    ("Y[a] = where(a < 1, X[a b + 1], 0.0)", "only axis names", 27),
    ("Y[a] = -X[a b + size(b) / 2]", "only axis names", 15),
    ("Y[a] = exp(X[a 0]) # a [ comment", "only axis names", 16),
    ("Y[a] = sum[b](X[a, b])", "only axis names", 18),
    ("Y[a] = f(X + 1 1)", "missing operator", 16),
    ("Y[a] = where(a < 1, X Z, 0.0)", "missing operator", 23),
    # two terms as a call's first argument: the state of `where(a = b, ...)`, whose `=` message
    # was given to every token there (`size(r c)` said "`=` inside an expression")
    ("Y[a] = size(a b)", "missing operator", 15),
    ("Y[a] = maximum(X X)", "missing operator", 18),
    ("Y[a] = exp(X 2)", "missing operator", 14),
    ("Y[a] = f(X, Z W)", "missing operator", 15),
    ("Y[a] = where(a = b, X, Z)", "`=` inside an expression", 16),
])
def test_friendly_syntax_messages_nested(text, message, col):
    (err,) = errors(text)
    assert message in err.message and err.help, err.message
    assert (err.span.line, err.span.col) == (1, col)


@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_of_two_values_names_the_elementwise_function(fn):
    """The language's own `maximum(a, b)` / `minimum(a, b)` (the hint named
    `where(a >= b, a, b)`), which then loads."""
    import napkin
    with pytest.raises(NapkinError) as exc:
        napkin.load(f"axis a\nin X[a]: f32\nY[a] = {fn}(X, 0.0)\nout Y: f32\n")
    (err,) = exc.value.diagnostics
    assert err.code == "N0208" and f"`{fn}imum(a, b)`" in err.help, err.help
    napkin.load(f"axis a\nin X[a]: f32\nY[a] = {fn}imum(X, 0.0)\nout Y: f32\n")


@pytest.mark.parametrize("text, message, help", [
    # language 1.1 reads a parenthesised expression as a position: the help said "indexing by
    # numbers is not part of the language", and after a first axis it was a bare token list
    ("Y[a] = X[a b + 1]", "only axis names", "`X[a (b + 1)]`"),
    ("Y[a] = X[a 0]", "only axis names", "`X[(0) b]`"),
    ("Y[a] = X[0]", "only axis names", "in parentheses"),
    # `split` is a keyword as `group` and `stream` are: it was missing from the list, and
    # `split[a] = X` was "unexpected `[`"
    ("split[a] = X", "keyword", "split"),
    ("in[a] = X", "keyword", "split"),
    ("in X[a]:", "dtype missing", "i32, i64"),
    # an expression continued on the next line outside brackets: "a keyword cannot be used
    # as a name" at the operator
    ("Y[a] = X\n  * 2", "cannot start with an operator", "open a parenthesis"),
    ("Y[a] = X\n  and Z", "cannot start with an operator", "open a parenthesis"),
])
def test_syntax_help_for_language_11(text, message, help):
    (err,) = errors(text)
    assert err.code in ("N0102", "N0103") and message in err.message, err.message
    assert help in err.help, err.help


@pytest.mark.parametrize("text, message, col", [
    # axes named after a call or a parenthesis: "unexpected `[`", whose expected tokens
    # (merged LALR states) listed "a name"
    ("Y[r c] = cumsum[c](X) [r c]", "follow an array's name", 23),
    ("Y[r] = sum[c](X)[r]", "follow an array's name", 17),
    ("Y[r c] = (X)[r c]", "follow an array's name", 13),       # was "missing operator"
    ("Y[r c] = where(r < 2, exp(X)[r c], 0)", "follow an array's name", 29),
    ("Y[r c] = X[r c][c r]", "a second list of axes", 16),
    ("Y[r] = sum[c][r](X)", "a second list of axes", 14),
])
def test_brackets_after_a_call_or_brackets_say_what_is_wrong(text, message, col):
    (err,) = errors(text)
    assert err.code == "N0102" and message in err.message, err.message
    assert (err.span.line, err.span.col) == (1, col)
    assert "a name" not in err.help and ("`T[c r]`" in err.help or "`X[c r]`" in err.help)


def test_items_of_declarations_count_against_the_statement_limit(monkeypatch):
    """100,000 axes on one line: refused before lark reads a statement (it took 3 CPU-s),
    at the first item past the limit, a declaration's items each counting as a statement."""
    monkeypatch.setattr(parser, "_lark", lambda: pytest.fail("lark read the text"))
    names = [f"a{i}" for i in range(100_000)]
    (err,) = errors("axis " + ", ".join(names))
    assert err.code == "N0503" and "100,000 statements and declared items" in err.message
    start = len("axis ") + len(", ".join(names[:10_000])) + 2
    assert (err.span.col, err.span.end_col) == (start + 1, start + 1 + len("a10000"))
    # the item past the limit is a statement of its own: the whole statement
    (err,) = errors("axis a, b\naxis " + ", ".join(names[:9_998]) + "\n# a, b\n in X[a]: f32\n")
    assert err.code == "N0503" and "10,001 statements" in err.message
    assert (err.span.line, err.span.col, err.span.end_col) == (4, 2, 14)


def test_items_at_the_statement_limit_are_fine():
    text = "axis " + ", ".join(f"a{i}" for i in range(9_998)) + "\nin X[a0]: f32\nout X: f32\n"
    assert len(parse(text).statements) == 3


def test_unexpected_token_lists_what_was_expected():
    (err,) = errors("axis a b")
    assert err.code == "N0102" and "expected" in err.help


def test_control_characters_are_escaped_in_messages():
    (err,) = errors("axis a\x00")
    assert err.code == "N0101" and "\\x00" in err.message


def test_deep_nesting_is_an_error_not_a_recursion_error():
    # The time bound catches a hang or a super-linear blow-up, not a slowdown: the four
    # inputs take ~1 s of CPU together, the bound is 60 s (tests/fuzz/test_frontend.py nests
    # deeper, to 50,000 with NAPKIN_FUZZ_SCALE >= 2). Process time, not the wall clock,
    # which a loaded machine stretches several times (9 s wall for 1.8 s CPU was seen).
    start = time.process_time()
    n = 20_000
    for text in ("Y[a] = " + "(" * n + "X" + ")" * n,
                 "Y[a] = " + "-" * n + "X",
                 "Y[a] = " + " + ".join(["X"] * n),
                 "Y[a] = " + "exp(" * n + "X" + ")" * n):
        (err,) = errors(text)
        assert err.code == "N0502"
    assert time.process_time() - start < 60


def test_nesting_at_the_limit_is_fine():
    text = "axis a\nin X[a]: f32\nY[a] = " + "(" * 190 + "X" + ")" * 190 + "\nout Y: f32"
    assert len(parse(text).statements) == 4


def test_split_ignores_brackets_in_comments():
    chunks = split_statements("axis a # (\nin X[a]: f32 # [[[\nY[a] = X\n")
    assert len(chunks) == 3


def test_crlf_line_endings():
    p = parse("axis a\r\nin X[a]: f32\r\nY[a] = X * 2\r\nout Y: f32\r\n")
    assert len(p.statements) == 4


def test_empty_file_parses_to_nothing():
    assert parse("").statements == () and parse("# only a comment\n\n").statements == ()


def test_items_of_a_line_share_the_dtype_written_after_them():
    p = parse("axis a\nin X[a], W[a]: f16, B[a]: bf16, C[a]: f32\nY[a] = X\nout Y, Z: f32, U\n")
    dtypes = [(i.name.text, i.dtype.text if i.dtype else None)
              for s in (p.statements[1], p.statements[3]) for i in s.items]
    assert dtypes == [("X", "f16"), ("W", "f16"), ("B", "bf16"), ("C", "f32"),
                      ("Y", "f32"), ("Z", "f32"), ("U", None)]
    shared = p.statements[1].items[0].dtype       # the span of the dtype it shares
    assert (shared.span.line, shared.span.col) == (2, 16)


def test_a_last_item_without_dtype_is_an_error_at_it():
    import napkin
    with pytest.raises(NapkinError) as exc:
        napkin.load(Source("t.napkin", "axis a\nin X[a]: f32\nY[a] = X\nZ[a] = X\nout Y: f16, Z\n"))
    d = exc.value.diagnostics[0]
    assert d.code == "N0401" and "`Z`" in d.message and (d.span.line, d.span.col) == (5, 13)
    assert "out Z: f16" in d.help


def test_a_text_parsed_again_is_its_tree_under_its_own_name_and_a_bad_one_fails_again():
    """parser.parse keeps the trees of texts it parsed (the library's, loaded by every entry
    point): a text parsed again is the tree the parse itself makes, of that Source (its name:
    spans are shown in it), and a text with an error raises the same error every time."""
    text = library_source("attention").text + "\naxis z\n"
    first = parser.parse(Source("a.napkin", text))
    for name in ("a.napkin", "b.napkin", "a.napkin"):
        again = parser.parse(Source(name, text))
        assert again == parser._parse(Source(name, text)) and again.source.name == name
    assert parser.parse(Source("a.napkin", text)) is first       # (kept, not parsed again)
    bad = "axis i\nin X[i]: f32\nY[i] = X *\nout Y: f32\n"
    assert errors(bad) == errors(bad) == list(_raised(lambda: parser._parse(Source("t.napkin", bad))))


def _raised(fn) -> tuple:
    with pytest.raises(NapkinError) as exc:
        fn()
    return exc.value.diagnostics


def test_a_byte_order_mark_is_no_part_of_the_text():
    """Editors that save UTF-8 with a byte-order mark (EF BB BF) made every such file N0101
    "unexpected character `\\ufeff`" at 1:1; an invalid byte after it is still N0104 at the
    offset in the file."""
    text = "axis a\nin X[a]: f32\nout X: f32\n"
    src = parser.decode(b"\xef\xbb\xbf" + text.encode(), "bom.napkin")
    assert src.text == text and len(parser.parse(src).statements) == 3
    with pytest.raises(NapkinError) as exc:
        parser.decode(b"\xef\xbb\xbfaxis a\nin X[a]: f\xff32\n", "bad.napkin")
    (diag,) = exc.value.diagnostics
    assert diag.code == "N0104" and "offset 20" in diag.message and diag.span.line == 2
