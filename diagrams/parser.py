"""Text to syntax tree: LALR parsing of each statement, spans kept, errors made friendly.

The file is split into statements first (`split.py`), so one syntax error costs
one statement, and every statement of the file is still parsed and reported.
Conversion from lark's tree is iterative, so no input can exhaust the stack.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from functools import lru_cache

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from . import ast, limits, tables
from .depth import DepthTree, TooDeep, watch
from .diagnostics import Collector, Diagnostic, NapkinError, Source, Span, error
from .split import Chunk, comma_offset, split_statements
from .syntax_errors import EXAMPLES, describe_expected, match

GRAMMAR_PATH = tables.GRAMMAR_PATH


@lru_cache(maxsize=1)
def _lark() -> Lark:
    # the shipped LALR tables when they match the grammar, else built from it (tables.py);
    # its trees count their depth as they are built (depth.py)
    return tables.load(tree_class=DepthTree)


def decode(data: bytes, name: str = "<input>") -> Source:
    """Bytes to a Source, or N0104 at the first byte that is not UTF-8. A byte-order mark that
    some editors write first (EF BB BF) is no part of the text (it was N0101 at 1:1)."""
    if len(data) > limits.MAX_SOURCE_BYTES:
        raise _too_large(len(data), name)
    skipped = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    data = data[skipped:]
    try:
        return Source(name, data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        good = Source(name, data[: exc.start].decode("utf-8"))
        raise error("N0104", f"byte 0x{data[exc.start]:02x} at offset {exc.start + skipped} is "
                    "not valid UTF-8",
                    good.span(len(good.text), len(good.text)),
                    help="save the diagram as UTF-8 text", source=good) from None


def _too_large(size: int, name: str) -> NapkinError:
    return error("N0501", f"{name} is {size:,} bytes; the limit is {limits.MAX_SOURCE_BYTES:,}",
                 help="split the diagram into smaller ones")


_PARSED: OrderedDict = OrderedDict()     # Source -> its Program (least recent first)
_MAX_PARSED = 256
_MAX_KEPT_CHARS = 1 << 16                # (a larger text is parsed every time, not kept)


def parse(source: Source) -> ast.Program:
    """Parse a whole diagram; raises NapkinError with every syntax error found. The syntax
    tree of a text parsed before (the library's diagrams, loaded by every entry point and
    test) is the one made then: a Program is immutable (frozen dataclasses and tuples), and
    a text that does not parse raises again."""
    found = _PARSED.get(source)
    if found is not None:
        _PARSED.move_to_end(source)
        return found
    program = _parse(source)
    if len(source.text) <= _MAX_KEPT_CHARS:
        _PARSED[source] = program
        if len(_PARSED) > _MAX_PARSED:
            _PARSED.popitem(last=False)
    return program


def _parse(source: Source) -> ast.Program:
    if len(source.text.encode("utf-8", "surrogatepass")) > limits.MAX_SOURCE_BYTES:
        raise _too_large(len(source.text.encode("utf-8", "surrogatepass")), source.name)
    chunks = split_statements(source.text)
    if len(chunks) > limits.MAX_STATEMENTS:
        c = chunks[limits.MAX_STATEMENTS]
        raise error("N0503", f"the diagram has {len(chunks):,} statements; the limit is "
                    f"{limits.MAX_STATEMENTS:,}", source.span(c.start, c.end),
                    help="split the diagram into smaller ones", source=source)
    _check_items(source, chunks)
    errors = Collector(source, limits.MAX_ERRORS)
    statements = []
    for chunk in chunks:
        try:
            statements.append(_parse_statement(source, chunk))
        except NapkinError as exc:
            errors.add(exc)
    errors.raise_if_any()
    return ast.Program(tuple(statements), source)


def _check_items(source: Source, chunks: list[Chunk]) -> None:
    """Each item of a declaration's list counts as a statement (`axis a, b` declares as much
    as `axis a` and `axis b`): 100,000 axes on one line took lark 3 CPU-s to read, refused
    here before it reads any."""
    total = 0
    for c in chunks:
        if total + c.commas + 1 > limits.MAX_STATEMENTS:
            items = sum(c.commas + 1 for c in chunks)
            k = limits.MAX_STATEMENTS - total          # the item past the limit follows the
            start = comma_offset(source.text, c, k) + 1 if k else c.start   # k-th comma
            start += len(source.text[start:c.end]) - len(source.text[start:c.end].lstrip())
            end = comma_offset(source.text, c, k + 1) if k < c.commas else c.end
            raise error("N0503", f"the diagram has {items:,} statements and declared items "
                        f"(`axis a, b` declares two); the limit is {limits.MAX_STATEMENTS:,}",
                        source.span(start, end),
                        help="split the diagram into smaller ones", source=source)
        total += c.commas + 1


def _parse_statement(source: Source, chunk: Chunk) -> ast.Statement:
    text = source.text[chunk.start:chunk.end]
    line, col = source.position(chunk.start)
    if chunk.max_depth > limits.MAX_DEPTH:
        raise _too_deep(source.span(chunk.deepest), chunk.max_depth)
    converter = _Converter(source, chunk.start, line, col)
    try:
        with watch():
            tree = _lark().parse(text)
    except TooDeep as exc:
        raise _too_deep(converter.span(exc.node), exc.node.depth) from None
    except UnexpectedInput as exc:
        raise _syntax_error(source, chunk, text, exc) from None
    except LarkError as exc:  # pragma: no cover - lark raises UnexpectedInput for bad text
        raise error("N0102", f"syntax error: {exc}", source.span(chunk.start, chunk.end)) from None
    return converter.convert(tree)


def _too_deep(span: Span, depth: int) -> NapkinError:
    return error("N0502", f"expression nested {depth} deep; the limit is {limits.MAX_DEPTH}",
                 span, help="name intermediate results in separate equations")


# --- syntax errors -----------------------------------------------------------

def _syntax_error(source: Source, chunk: Chunk, text: str, exc: UnexpectedInput) -> NapkinError:
    if isinstance(exc, UnexpectedCharacters):
        offset = chunk.start + exc.pos_in_stream
        ch = source.text[offset]
        shown = ch if ch.isprintable() and not ch.isspace() else ch.encode("unicode_escape").decode()
        help_text = "names are ASCII letters, digits and `_`; comments start with `#`"
        if ch == ";":
            help_text = "statements end at the end of the line; remove the `;`"
        elif ch in "{}":
            help_text = "use `(` and `)` to group, `[` and `]` for axes"
        return error("N0101", f"unexpected character `{shown}`", source.span(offset),
                     help=help_text, source=source)
    assert isinstance(exc, UnexpectedToken)
    token = exc.token
    at_end = token.type == "$END"
    if at_end:
        offset = chunk.end
        span = source.span(offset, offset)
    else:
        offset = chunk.start + token.start_pos
        span = source.span(offset, chunk.start + token.end_pos)
    after = text[:token.start_pos].rstrip()[-1:] if not at_end else ""
    if token.type == "_LSQB" and after in (")", "]"):
        return _brackets_after(after, span, source)
    label = _match(exc)
    if at_end and chunk.unclosed is not None:
        opener = source.text[chunk.unclosed]
        closer = ")" if opener == "(" else "]"
        return error("N0103", f"`{opener}` is never closed", source.span(chunk.unclosed),
                     help=f"add the matching `{closer}`", source=source)
    if label is not None:
        message, help_text, _ = EXAMPLES[label]
        code = "N0103" if at_end else "N0102"
        return error(code, message, span, help=help_text, source=source)
    if label is None and not at_end and token.type in _IN_POSITIONS and \
            _innermost_open(text, token.start_pos) == "[":
        # (the examples' parser states are those of a top-level read: `X[a b + 1]` inside a
        # call, a `where` or after a unary minus reaches other states with the same mistake)
        message, help_text, _ = EXAMPLES["bad_axis_list"]
        return error("N0102", message, span, help=help_text, source=source)
    if label is None and not at_end and token.type in ("NAME", "NUMBER", "_LPAR", "INF") and \
            "STAR" in exc.expected:
        message, help_text, _ = EXAMPLES["missing_operator"]     # (nested: `f(X 2)`)
        return error("N0102", message, span, help=help_text, source=source)
    expected = describe_expected(exc.expected)
    if at_end:
        return error("N0103", "statement ends too early", span,
                     help=f"expected {expected}" if expected else None, source=source)
    shown = token.value if len(token.value) <= 40 else token.value[:37] + "..."
    return error("N0102", f"unexpected `{shown}`", span,
                 help=f"expected {expected}" if expected else None, source=source)


def _brackets_after(closer: str, span: Span, source: Source) -> NapkinError:
    """`[` after a `)` or a `]`: axes named for something no array's name (LALR's expected
    tokens there, merged from other states, listed a name)."""
    if closer == ")":
        return error("N0102", "axes in brackets follow an array's name, not a call or a "
                     "parenthesis", span, help="a result has the axes of its equation: name it "
                     "(`T[r c] = cumsum[c](X)`), then read it as `T[c r]` in the next one",
                     source=source)
    return error("N0102", "a second list of axes", span,
                 help="one bracket names all the axes: `X[c r]`, `sum[r c](X)`", source=source)


# tokens that are no axis name, met between an array's brackets: a computed position written
# without its parentheses (`X[a b + 1]`, `X[a 0]`, `X[a, b]`)
_IN_POSITIONS = {"PLUS", "MINUS", "STAR", "POW", "FLOORDIV", "SLASH", "NUMBER", "_COMMA",
                 "COMPARE", "_EQUAL"}


def _innermost_open(text: str, end: int) -> str | None:
    """The innermost bracket (`(` or `[`) still open at offset `end` of a statement's text,
    comments skipped."""
    stack: list[str] = []
    comment = False
    for ch in text[:end]:
        if comment:
            comment = ch != "\n"
        elif ch == "#":
            comment = True
        elif ch in "([":
            stack.append(ch)
        elif ch in ")]" and stack:
            stack.pop()
    return stack[-1] if stack else None


def _match(exc: UnexpectedInput) -> str | None:
    return match(exc, _lark().parse)


# --- lark tree to AST ----------------------------------------------------------

class _Converter:
    """Builds AST nodes from a lark tree bottom-up with an explicit stack."""

    def __init__(self, source: Source, offset: int, line: int, col: int):
        self.source = source
        self.offset, self.line, self.col = offset, line, col

    def span(self, item) -> Span:
        if isinstance(item, Token):
            raw = Span(item.start_pos, item.end_pos, item.line, item.column,
                       item.end_line, item.end_column)
        else:
            m = item.meta
            raw = Span(m.start_pos, m.end_pos, m.line, m.column, m.end_line, m.end_column)
        return raw.shifted(self.offset, self.line, self.col)

    def name(self, token: Token) -> ast.Name:
        span = self.span(token)
        if len(token.value) > limits.MAX_NAME_LENGTH:
            raise error("N0504", f"name of {len(token.value)} characters; the limit is "
                        f"{limits.MAX_NAME_LENGTH}", span, help="use a shorter name")
        return ast.Name(str(token.value), span)

    def convert(self, root: Tree):
        done: dict[int, object] = {}
        depth: dict[int, int] = {}
        stack: list[tuple[object, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if isinstance(node, Token):
                done[id(node)] = node
                depth[id(node)] = 0
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(node.children))
                continue
            kids = [done[id(c)] for c in node.children]
            d = 1 + max((depth[id(c)] for c in node.children), default=0)
            if d > limits.MAX_DEPTH:
                raise _too_deep(self.span(node), d)
            depth[id(node)] = d
            done[id(node)] = getattr(self, "rule_" + node.data)(node, kids)
        return done[id(root)]

    # statements
    def rule_axis_decl(self, node, kids):
        return ast.AxisDecl(tuple(kids[1:]), self.span(node))

    def rule_axis_item(self, node, kids):
        given = kids[1] if len(kids) > 1 else None
        if isinstance(given, ast.SizeOf):
            return ast.AxisItem(self.name(kids[0]), None, given)
        return ast.AxisItem(self.name(kids[0]), given)

    def rule_size_of(self, node, kids):
        return ast.SizeOf(self.name(kids[0]), self.name(kids[1]), self.span(node))

    def rule_size(self, node, kids):
        negative = len(kids) == 2
        return ast.SizeLit(str(kids[-1].value), negative, self.span(node))

    def rule_input_decl(self, node, kids):
        return ast.InputDecl(_share_dtypes(kids[1:]), self.span(node))

    def rule_input_item(self, node, kids):
        axes, axes_span = kids[1]
        dtype = self.name(kids[2]) if len(kids) > 2 else None
        return ast.InputItem(self.name(kids[0]), axes, axes_span, dtype, self.span(node))

    def rule_output_decl(self, node, kids):
        return ast.OutputDecl(_share_dtypes(kids[1:]), self.span(node))

    def rule_output_item(self, node, kids):
        dtype = self.name(kids[1]) if len(kids) > 1 else None
        return ast.OutputItem(self.name(kids[0]), dtype, self.span(node))

    def rule_hint(self, node, kids):
        level = self.name(kids[5]) if len(kids) > 5 else None
        return ast.Hint(str(kids[0].value), self.name(kids[1]), kids[3], level, self.span(node))

    def rule_equation(self, node, kids):
        axes, axes_span, dtype = None, None, None
        for k in kids[1:-1]:         # [axes] and `: dtype`, each optional
            if isinstance(k, tuple):
                axes, axes_span = k
            else:
                dtype = self.name(k)
        return ast.Equation(self.name(kids[0]), axes, axes_span, kids[-1], self.span(node), dtype)

    def rule_axis_list(self, node, kids):
        return tuple(self.name(k) for k in kids), self.span(node)

    def rule_positions(self, node, kids):
        return tuple(kids), self.span(node)

    def rule_axis_position(self, node, kids):
        return self.name(kids[0])

    def rule_call_args(self, node, kids):
        return ("args", tuple(kids))

    # expressions
    def rule_number(self, node, kids):
        tok = kids[0]
        value = float(tok.value)
        if not math.isfinite(value):
            raise error("N0505", f"number `{_clip(tok.value)}` is too large for a float",
                        self.span(tok), help="write `inf` for infinity")
        if str(tok.value).isdigit() and int(tok.value) > limits.MAX_INTEGER:   # (an integer literal)
            raise error("N0505", f"integer `{_clip(tok.value)}` is past the 64-bit range",
                        self.span(tok), help=f"integers are computed in 64 bits (at most "
                        f"{limits.MAX_INTEGER}); write a large number as a float (`1e22`)")
        return ast.Number(value, str(tok.value), self.span(tok))

    def rule_inf(self, node, kids):
        return ast.Inf(self.span(kids[0]))

    def rule_ref(self, node, kids):
        axes = axes_span = args = None
        for k in kids[1:]:
            if isinstance(k, tuple) and k and k[0] == "args":
                args = k[1]
            else:
                axes, axes_span = k
        return ast.Ref(self.name(kids[0]), axes, args, self.span(node), axes_span)

    def rule_binop(self, node, kids):
        left, op, right = kids
        return ast.BinOp(str(op.value), left, right, self.span(node), self.span(op))

    def rule_unop(self, node, kids):
        op, operand = kids
        return ast.UnOp(str(op.value), operand, self.span(node), self.span(op))


def _share_dtypes(items) -> tuple:
    """`in Q[..], K[..]: f16` and `out Y, Z: f32`: an item without a dtype takes the next
    one written on its line (an item with its own keeps it)."""
    out, dtype = [], None
    for item in reversed(items):
        if item.dtype is None and dtype is not None:
            item = dataclasses.replace(item, dtype=dtype)
        dtype = item.dtype
        out.append(item)
    return tuple(reversed(out))


def _clip(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["parse", "decode", "Diagnostic"]
