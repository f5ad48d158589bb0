"""An immutable fingerprint of a graph's contents, for memoising what is computed from a graph
across the graph objects that hold the same contents (the planner's kernel models: every
target and shape a diagram is planned for, and each stage's planner, canonicalise the same
diagram into a new but equal graph).

`token(g)` freezes every node, edge and graph attribute (dicts and lists into tuples, NumPy
arrays into their dtype, shape and bytes) and returns a small integer standing for those
contents: two graphs get the same token exactly when their frozen contents are equal. A
graph with an attribute it cannot freeze gets None (nothing memoised for it). The token is
taken when a planner is made: the planner, like its memo, assumes the graph does not change
while it plans.

`derived(base, *how)` is the token of a graph made from one whose token is `base` by a
deterministic change that `how` spells out in full (stored16.decision_token: a copy with
another 16-bit storage decision), without freezing the new graph: two graphs get the same
derived token exactly when their bases' tokens and their changes are equal. (Tokens are never
reused, so `base` stands for the same contents however long ago it was issued.)
"""

from __future__ import annotations

import dataclasses
import enum
from collections import OrderedDict

import numpy as np

from .graph import DiGraph

_TOKENS: OrderedDict = OrderedDict()     # frozen contents -> token (least recent first)
_MAX_GRAPHS = 512
_next = [0]


class _Unfrozen(Exception):
    pass


# values that are their own fingerprint (a mutable object never is: its contents are frozen)
_LEAVES = (bool, int, complex, bytes, type)


def _freeze(x):
    kind = type(x)
    if kind is str or x is None:
        return x
    if kind is tuple or kind is list:
        return (kind, tuple([_freeze(v) for v in x]))
    if kind is dict:
        return (dict, tuple([(k, _freeze(v)) for k, v in x.items()]))
    names = _FIELDS.get(kind)
    if names is not None:        # a dataclass: its fields (not what it caches beside them)
        return (kind, tuple([_freeze(getattr(x, f)) for f in names]))
    if isinstance(x, float):            # (typed: 1 == 1.0 == True, and -0.0 == 0.0)
        return (float, x.hex())
    if isinstance(x, _LEAVES):
        return (kind, x)
    if isinstance(x, (set, frozenset)):
        return (frozenset, frozenset(_freeze(v) for v in x))
    if isinstance(x, np.ndarray):
        return (np.ndarray, x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, np.generic):
        return (kind, x.tobytes())
    if isinstance(x, enum.Enum):
        return (kind, x.name)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(x))
        return _freeze(x)
    if isinstance(x, (tuple, list, dict)):       # (subclasses: as their base, typed)
        return (kind, _freeze(tuple(x.items()) if isinstance(x, dict) else tuple(x)))
    raise _Unfrozen(kind.__name__)


_FIELDS: dict = {}       # dataclass -> its fields' names


def freeze(g: DiGraph) -> tuple:
    """Every node (with its attributes), edge (with its attributes) and graph attribute of
    `g`, in insertion order, as nested tuples (raises _Unfrozen for what it cannot freeze)."""
    return (tuple((n, _freeze(d)) for n, d in g._node.items()),
            tuple((u, tuple((v, _freeze(d)) for v, d in nbrs.items()))
                  for u, nbrs in g._succ.items()),
            _freeze(g.graph))


def token(g: DiGraph) -> int | None:
    """A small integer standing for the graph's contents (see the module docstring)."""
    try:
        key = freeze(g)
    except _Unfrozen:
        return None
    return _issued(key)


def _issued(key) -> int:
    """The token standing for `key` (a new one the first time it is seen)."""
    found = _TOKENS.get(key)
    if found is None:
        _next[0] += 1
        found = _TOKENS[key] = _next[0]
        if len(_TOKENS) > _MAX_GRAPHS:
            _TOKENS.popitem(last=False)
    else:
        _TOKENS.move_to_end(key)
    return found


def derived(base: int | None, *how) -> int | None:
    """The token of the graph a deterministic change `how` (frozen as attributes are) makes of
    a graph whose token is `base` (see the module docstring); None where either is None."""
    if base is None:
        return None
    try:
        return _issued(("derived", base, _freeze(how)))
    except _Unfrozen:
        return None
