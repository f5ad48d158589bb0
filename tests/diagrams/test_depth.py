"""A statement nested past the limit stops while lark builds its tree (diagrams/depth.py),
with the same error and span the converter gives for the whole tree (the oracle: lark's
plain tree of the statement, converted), and without building the rest."""

from __future__ import annotations

import time

import pytest

from napkin.diagrams import depth, parser, tables
from napkin.diagrams.diagnostics import NapkinError, Source


def _errors(text: str):
    with pytest.raises(NapkinError) as exc:
        parser.parse(Source("t.napkin", text))
    return list(exc.value.diagnostics)


def _converter_error(statement: str):
    """What the converter says of the whole tree lark builds without watching."""
    tree = tables.load().parse(statement)
    with pytest.raises(NapkinError) as exc:
        parser._Converter(Source("t.napkin", statement), 0, 1, 1).convert(tree)
    (err,) = exc.value.diagnostics
    return err


def _chain(n: int) -> str:
    return "Y[a] = " + " + ".join(["X"] * n)


@pytest.mark.parametrize("statement", [
    _chain(200),          # the equation (depth 201), the root, is the first past the limit
    _chain(201),          # a binop is, the equation after it stops the parse
    _chain(5000),
    # two subtrees past the limit: the first (leftmost) is reported, as the converter does
    "Y[a] = f(" + " * ".join(["X"] * 300) + ", " + " - ".join(["X"] * 400) + ")",
    "Y[a] = " + "-" * 250 + "X",
    "Y[a] = X * " + "exp(" * 150 + " * ".join(["X"] * 100) + ")" * 150,
])
def test_the_error_and_its_span_are_the_converters(statement):
    (err,) = _errors(statement)
    want = _converter_error(statement)
    assert err.code == want.code == "N0502"
    assert err.message == want.message
    assert (err.span.start, err.span.end, err.span.line, err.span.col) == \
        (want.span.start, want.span.end, want.span.line, want.span.col)


def test_the_limit_itself_parses():
    program = parser.parse(Source("t.napkin", "axis a\nin X[a]: f32\n" + _chain(199)
                                  + "\nout Y: f32\n"))
    assert len(program.statements) == 4


def test_a_long_chain_stops_soon_after_the_limit(monkeypatch):
    built = []
    init = depth.DepthTree.__init__

    def counting(self, *args, **kw):
        built.append(1)
        init(self, *args, **kw)

    monkeypatch.setattr(depth.DepthTree, "__init__", counting)
    (err,) = _errors(_chain(50_000))
    assert err.code == "N0502"
    assert len(built) < 1_000      # about two per term up to the limit, not 100,000


def test_no_watch_no_stop():
    # outside a parse of the parser's own (tests, tools), the tree is built whole
    tree = parser._lark().parse(_chain(300))
    assert tree.depth == 301      # 299 binops over a ref, in an equation


def test_a_long_argument_list_counts_its_arguments_once():
    # lark grows one helper tree per `, expr` of a call's arguments (one list, spliced into
    # call_args): counting each helper's children was quadratic (8,000 arguments: 9 CPU-s).
    # Process time, not the wall clock: linear takes ~0.5 s here, quadratic ~5 s.
    deep = " + ".join(["X"] * 150)
    text = "Y[a] = f(" + ", ".join(["X"] * 12_000 + [deep] + ["X"] * 10) + ")"
    start = time.process_time()
    tree = parser._lark().parse(text)
    assert time.process_time() - start < 2.5
    (call_args,) = [c for c in tree.iter_subtrees() if c.data == "call_args"]
    assert len(call_args.children) == 12_011
    assert call_args.depth == 1 + 150      # the deep argument: 149 binops over a ref (150)
