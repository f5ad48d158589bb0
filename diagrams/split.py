"""Split diagram text into statements: one per line, continued while a bracket is open.

An open bracket normally joins the following lines into one statement, but a
following line that clearly starts a new statement (`axis`, `in`, `out`,
`group`, `stream`, or `NAME[...] =`) ends it, so an unclosed bracket is
reported where it is, and the rest of the file is still checked.

Each chunk counts its commas outside brackets (a declaration's list items, `axis a, b` being
two), so the parser bounds the items of all lists before lark reads any (N0503).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STATEMENT_START = re.compile(
    r"[ \t\f]*(?:(?:axis|in|out|group|stream)\b|[A-Za-z_][A-Za-z0-9_]*[ \t]*(?:\[[^\]\n]*\])?[ \t]*=(?!=))"
)


@dataclass(frozen=True)
class Chunk:
    """One statement's text slice [start, end) and the deepest bracket nesting seen in it."""

    start: int
    end: int
    max_depth: int
    unclosed: int | None  # offset of the outermost bracket left open, if any
    deepest: int | None   # offset of the first bracket at the deepest nesting
    commas: int = 0       # commas outside brackets: a declaration's list has commas + 1 items


def split_statements(text: str) -> list[Chunk]:
    chunks: list[Chunk] = []
    n = len(text)
    i = 0
    start = 0
    depth = 0
    max_depth = 0
    opens: list[int] = []
    deepest = None
    commas = 0
    has_content = False

    def flush(end: int) -> None:
        nonlocal start, depth, max_depth, opens, has_content, deepest, commas
        if has_content:
            chunks.append(Chunk(start, end, max_depth, opens[0] if opens else None, deepest,
                                commas))
        start, depth, max_depth, opens, has_content, deepest, commas = end, 0, 0, [], False, \
            None, 0

    while i < n:
        ch = text[i]
        if ch == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if ch == "\n":
            if depth == 0 or _STATEMENT_START.match(text, i + 1):
                flush(i)
                start = i + 1
            i += 1
            continue
        if ch in "([":
            depth += 1
            if depth > max_depth:
                max_depth, deepest = depth, i
            opens.append(i)
        elif ch in ")]":
            if depth > 0:
                depth -= 1
                opens.pop()
        elif ch == "," and depth == 0:
            commas += 1
        if not ch.isspace():
            if not has_content:
                start = i
            has_content = True
        i += 1
    flush(n)
    return chunks


def comma_offset(text: str, chunk: Chunk, k: int) -> int:
    """The offset of the k-th (from 1) comma outside brackets and comments in `chunk`."""
    depth, i = 0, chunk.start
    while i < chunk.end:
        ch = text[i]
        if ch == "#":
            j = text.find("\n", i)
            i = chunk.end if j < 0 else j
            continue
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            k -= 1
            if k == 0:
                return i
        i += 1
    raise ValueError("fewer commas than counted")
