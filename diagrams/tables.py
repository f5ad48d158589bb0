"""napkin.lark's LALR parser, shipped ready-made in the package instead of built at every start.

Lark takes tens of milliseconds to build the LALR tables from the grammar, which is most of
what `napkin check` would spend parsing. The tables are built once, when the grammar changes,
and shipped next to it as `napkin_lalr.json`:

    python -m napkin.diagrams.tables           # regenerate after editing napkin.lark
    python -m napkin.diagrams.tables --check   # exit 1 if the shipped tables are stale

Why not lark's own `cache=True`: it keeps the tables in a temporary directory and reads them
back with pickle, so a file planted in a shared /tmp would run code. Why not `Lark.save`: it
pickles too (harmless inside the package, but then loading the parser still means unpickling).
The shipped file is JSON, which cannot run anything: lark's own serialised form of the parser
(`Lark.memo_serialize`, what `Lark.save` pickles and lark's standalone generator prints as
Python literals), with tuples and non-string dictionary keys tagged so that it reads back
exactly. `Lark.load` takes that dictionary directly.

The file records the hash of the grammar and options it was built from and the lark version
that built it (the serialised form is lark's internal format). When the file is missing,
unreadable or does not match, the parser is built from the grammar instead, and nothing is
written anywhere. tests/diagrams/test_tables.py fails when the shipped file is stale.
(lark numbers the states in the order of sets of objects, so two regenerations differ in
their numbering, not in the language they parse.)
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

GRAMMAR_PATH = Path(__file__).with_name("napkin.lark")
TABLES_PATH = Path(__file__).with_name("napkin_lalr.json")
REGENERATE = "python -m napkin.diagrams.tables"
FORMAT = 1

# How napkin's parser is configured; part of the tables' key.
OPTIONS = {"parser": "lalr", "lexer": "basic", "propagate_positions": True,
           "maybe_placeholders": False}

_ITEMS, _TUPLE = "__items__", "__tuple__"


def grammar_hash(grammar: str) -> str:
    """The key the tables were built for: the grammar's text and the parser's options."""
    text = grammar + "\n" + json.dumps(OPTIONS, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _lark_version() -> str:
    import lark
    return lark.__version__


def build(grammar: str | None = None, tree_class=None):
    """The parser built from the grammar (the slow way; writes nothing), building trees of
    `tree_class` (lark's Tree when None: what the tables are serialised from)."""
    from lark import Lark
    extra = {"tree_class": tree_class} if tree_class is not None else {}
    return Lark(GRAMMAR_PATH.read_text() if grammar is None else grammar, **OPTIONS, **extra)


def load(tables_path: Path = TABLES_PATH, grammar_path: Path = GRAMMAR_PATH, tree_class=None):
    """The parser for the grammar at `grammar_path`: from the shipped tables when they match
    it and this lark, else built from the grammar (trees of `tree_class`, as `build`)."""
    grammar = grammar_path.read_text()
    parser = from_tables(tables_path, grammar, tree_class)
    return parser if parser is not None else build(grammar, tree_class)


def from_tables(tables_path: Path, grammar: str, tree_class=None):
    """The parser read from the tables file, or None when it is missing, unreadable, or was
    built for another grammar, other options or another lark version. (`tree_class` is one of
    the options lark lets a loaded parser change; `Lark._load_from_dict` is the classmethod
    lark's own standalone parsers load through: the version check above pins it.)"""
    from lark import Lark
    try:
        shipped = decode(tables_path.read_text(encoding="utf-8"))
        if (shipped.get("format") != FORMAT or shipped.get("grammar") != grammar_hash(grammar)
                or shipped.get("lark") != _lark_version()):
            return None
        if tree_class is None:
            return Lark.load({"data": shipped["data"], "memo": shipped["memo"]})
        return Lark._load_from_dict(shipped["data"], shipped["memo"], tree_class=tree_class)
    except Exception:  # noqa: BLE001 - any damage to the file means: build from the grammar
        return None


def serialise(parser, grammar: str) -> str:
    """The tables file's text for a parser built from `grammar`."""
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    return encode({"format": FORMAT, "grammar": grammar_hash(grammar),
                   "lark": _lark_version(), "data": data, "memo": memo})


# --- JSON that keeps tuples and non-string keys ------------------------------

def _tagged(o):
    if isinstance(o, dict):
        if all(isinstance(k, str) for k in o) and _ITEMS not in o and _TUPLE not in o:
            return {k: _tagged(v) for k, v in o.items()}
        return {_ITEMS: [[_tagged(k), _tagged(v)] for k, v in o.items()]}
    if isinstance(o, tuple):
        return {_TUPLE: [_tagged(v) for v in o]}
    if isinstance(o, list):
        return [_tagged(v) for v in o]
    if o is None or isinstance(o, (str, bool, int, float)):
        return o
    raise TypeError(f"cannot store a {type(o).__name__} in the parser tables")


def _untag(d: dict):
    if len(d) == 1:
        if _ITEMS in d:
            return {k: v for k, v in d[_ITEMS]}
        if _TUPLE in d:
            return tuple(d[_TUPLE])
    return d


def encode(value) -> str:
    return json.dumps(_tagged(value), separators=(",", ":"), sort_keys=False) + "\n"


def decode(text: str):
    return json.loads(text, object_hook=_untag)


# --- regeneration ------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    grammar = GRAMMAR_PATH.read_text()
    if "--check" in args:
        stale = from_tables(TABLES_PATH, grammar) is None
        print(f"{TABLES_PATH.name}: {'stale: run ' + REGENERATE if stale else 'up to date'}")
        return 1 if stale else 0
    text = serialise(build(grammar), grammar)
    TABLES_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {TABLES_PATH} ({len(text):,} bytes) for lark {_lark_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
