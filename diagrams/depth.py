"""Nesting depth counted while lark builds the tree, so a statement too deep stops early.

The language limits expressions to `limits.MAX_DEPTH` levels (N0502). A flat chain
`X + X + ... + X` of 100,000 tokens has no bracket for `split.py`'s count to see, and lark
took 4 CPU-s to build its tree before the converter measured it. `DepthTree` is the tree
class lark builds with (`tables.load(tree_class=...)`): each node knows its depth (1 + its
deepest child, a token 0: what the converter counts), and the first node past the limit is
remembered; at the next node lark builds (the first one's span is set by then) parsing stops
with `TooDeep(that node)`. One parse at a time per thread (`watch`).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from lark import Tree

from . import limits

_STATE = threading.local()


class TooDeep(Exception):
    """The first node (in the order lark builds them) nested past the limit."""

    def __init__(self, node: Tree):
        super().__init__(node.data)
        self.node = node


class DepthTree(Tree):
    def __init__(self, data, children, meta=None):
        super().__init__(data, children, meta)
        first = getattr(_STATE, "first", None)
        if first is not None:
            raise TooDeep(first)
        if data.startswith("_"):    # lark's helper of a repetition (`(_COMMA expr)*`): its
            self.depth = 0          # children, one list growing, are spliced into the parent
            return                  # that counts them (counting here was quadratic)
        self.depth = 1 + max((getattr(c, "depth", 0) for c in children), default=0)
        if self.depth > limits.MAX_DEPTH and getattr(_STATE, "watching", False):
            _STATE.first = self


@contextmanager
def watch():
    """Within: a node past the limit stops the parse (TooDeep) at the next node built, or
    at the end of the block when it was the last (the statement's root)."""
    _STATE.first, _STATE.watching = None, True
    try:
        yield
        if _STATE.first is not None:
            raise TooDeep(_STATE.first)
    finally:
        _STATE.first, _STATE.watching = None, False
