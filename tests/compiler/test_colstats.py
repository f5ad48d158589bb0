"""compiler/colstats.py: a tensor-core product and its row statistics over its columns, fused
into one kernel (an LM head and its cross-entropy, split over the vocabulary or not), told
apart from the kernels that are not one (a statistic over a load of the columns, of another
statistic, the product stored, columns wider than a block's tile, not a mergeable reduction)."""

from __future__ import annotations

import pytest

import napkin
from napkin.compiler import colstats, ir, tensorcore
from napkin.compiler.kernels import fused_kernel
from napkin.compiler.model import kernel_model
from napkin.compiler.plan import plan
from napkin.diagrams.diagnostics import Source

HEAD = "axis t, m, v\nin H[t m]: {dt}\nin W[v m]: {dt}\nin label[t]: i32\n"
CE = HEAD + "Z[t v] = H * W\nL[t] = logsumexp[v](Z) - sum[v](where(v == label, Z, 0))\nout L: f32\n"


def _fused(text: str, shape: dict, split: dict | None = None, dt: str = "f16"):
    """The plan's product and the kernel reading it fused into one (what the lowering would
    run), its model streaming the product's reduced axis, and colstats' verdict."""
    d = napkin.load(Source("<cs>", text.format(dt=dt)))
    p = plan(d, "h100", shape, overrides={"split": split} if split else None)
    g = p.graph
    ks = [kp.kernel for kp in p.kernels]
    (ka,) = [k for k in ks if any(isinstance(ir.op(g, n), ir.Contract) for n in k.nodes)]
    members = set(ka.nodes) | set(ka.stores)
    if not any(isinstance(ir.op(g, n), ir.Reduce) for n in ka.nodes):   # (else already one)
        for kb in ks:
            if set(ka.stores) & set(kb.loads):
                members |= set(kb.nodes)
    fk = fused_kernel(g, "kf", members)
    red = ir.op(g, next(n for n in ka.nodes if isinstance(ir.op(g, n), ir.Contract))).axes[0]
    return g, colstats.examine(g, fk, kernel_model(g, fk, red), p.target, p.sizes,
                               tensorcore.examine)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_the_cross_entropy_split_over_the_vocabulary_is_one(dt):
    g, found = _fused(CE, {"t": 67, "m": 80, "v": 301}, {"v": 3}, dt)
    assert isinstance(found, colstats.Columns), found
    s = found.site
    assert (s.row, s.col, s.red, s.batch, s.dtype) == ("t", "s_v", "m", ("p_v",), dt)
    assert found.whole == 101                       # ceil(301 / 3), whole in a block
    assert [(st.kind, ir.type_of(g, st.node).axes) for st in found.stats] == [
        ("logsumexp", ("p_v", "t")), ("sum", ("p_v", "t"))]


def test_unsplit_columns_under_one_tile_not_a_logsumexp_alone():
    _, found = _fused(CE, {"t": 33, "m": 48, "v": 200})
    assert isinstance(found, colstats.Columns) and found.site.col == "v" and found.whole == 200
    # a logsumexp alone is FlashAttention's without P V (flash_alone.py), as it was before
    lse = HEAD + "Z[t v] = H * W\nL[t] = logsumexp[v](Z)\nout L: f32\n"
    _, found = _fused(lse, {"t": 33, "m": 48, "v": 7})
    assert isinstance(found, str) and "FlashAttention without P V" in found


@pytest.mark.parametrize("text, why", [
    (CE, "wider than a tensor-core block's tile"),                    # v = 300 unsplit
    (CE.replace("out L: f32", "out L: f32\nout Z: f32"), "stores a value over `v`"),
    (HEAD.replace("in label[t]: i32", "in b[v]: f32") + "Z[t v] = H * W\n"
     "L[t] = logsumexp[v](Z + b)\nout L: f32\n", "a load beside the product"),
    (HEAD + "Z[t v] = H * W\nL[t] = sum[v](exp(Z - max[v](Z)))\nout L: f32\n",
     "a statistic of another statistic"),
    (HEAD + "Z[t v] = H * W\nL[t] = mean[v](Z)\nout L: f32\n", "is not a float"),
])
def test_what_is_not_one_says_why(text, why):
    _, found = _fused(text, {"t": 33, "m": 48, "v": 300}, {"v": 1})     # (unsplit)
    assert isinstance(found, str) and why in found, found
