"""A product's contracted axes merged through a view that renames them (compiler/local_merge.py,
`_own`): `dW[m e] = dK[b s e] * X[b s m]` with X stored `[b t m]` (what rename._read_through
makes of a weight gradient's `g11[b s m] = X[b s m]`) sums `b s` as one axis `(b*s)`: X's
`b t` are one run of its memory, read as `X[(b*t) m]` and renamed `(b*s)`. Where the renamed
axes lie in another order than the other operand's (X stored `[t b m]`) or the view swaps
positions (`X[s b m]` of `X[b t m]`), nothing merges. Planned at scale (the merged product)
and emulated at odd sizes against float64, the unmerged cases too."""

from __future__ import annotations

import numpy as np
import pytest

import napkin
from napkin.compiler.plan import plan
from napkin.compiler.schedule import PRODUCT
from napkin.pipeline import run_plan

from .close import assert_close

WEIGHT = """axis b, t, s, m, e
in X[{x}]: f16
in dK[b s e]: f16
dW[m e] = dK * X[{view}]
out dW: f16
"""
RENAMED = WEIGHT.format(x="b t m", view="b s m")
# X holds t before b: the view's `s b` are adjacent in memory, but not in dK's order
ORDER = WEIGHT.format(x="t b m", view="s b m")
# position 0 of X (b) read as s, position 1 (t) as b: a transposition under one size
SWAP = WEIGHT.format(x="b t m", view="s b m")


def _merged(p) -> list:
    return [(axis, chain) for _, axis, chain in p.graph.graph.get("local_merged", ())]


def test_a_renamed_operand_merges_its_contracted_axes_in_one_product():
    p = plan(napkin.load(RENAMED), "h100", dict(b=2, t=2048, s=2048, m=1024, e=512))
    (k,) = p.kernels                    # no copy of X, no partial sum over b
    assert k.model.reduced == ("(b*s)",) and k.schedule.engine == PRODUCT, \
        (k.model.reduced, k.schedule.engine)
    assert _merged(p) == [("(b*s)", ("b", "s"))]
    assert ("(b*t)", ("b", "t")) in [(a, info.merged) for a, info in
                                     p.graph.graph["axes"].items()]   # X's own names


@pytest.mark.parametrize("text, merged", [(RENAMED, True), (ORDER, False), (SWAP, False)],
                         ids=["renamed", "order", "swap"])
def test_merged_through_a_renaming_only_where_memory_allows(rng, text, merged):
    """Planned where merging pays (the merge is priced), run at odd sizes: X's memory read at
    the positions the view names, dW = sum over b s of dK[b s e] X[.. s .. b .. m]."""
    swap = text == SWAP                 # (one size for b, t and s)
    big = dict(b=512 if swap else 2, t=512 if swap else 2048, m=1024, e=512)
    p = plan(napkin.load(text), "h100", dict(big, s=big["t"]))
    assert len(p.kernels) == 1
    assert _merged(p) == ([("(b*s)", ("b", "s"))] if merged else []), _merged(p)
    b, t, m, e = (37 if swap else 3), 37, 40, 24
    declared = text.split("in X[")[1].split("]")[0].split()
    view = text.split("* X[")[1].split("]")[0].split()
    X = rng.standard_normal([dict(b=b, t=t, m=m)[a] for a in declared]).astype(np.float16)
    dK = rng.standard_normal((b, t, e)).astype(np.float16)
    out = run_plan(p, dict(X=X, dK=dK), dict(b=b, t=t, s=t, m=m, e=e))
    want = np.einsum(f"bse,{''.join(view)}->me", dK.astype(np.float64), X.astype(np.float64))
    assert_close(out["dW"], want, "f16", slack=4.0)
