"""A mask monotone in the indices through floor divisions and the like (compiler/monotone.py):
block-causal attention, `where(x // 64 <= q // 64, S, -inf)`, skipped no chunk (masking._expr
read no floor division: 63 us at b=1 h=16 q=x=2048 d=64, h100 model, against 28.1 us for
causal; now 28.4 us). Its spellings through floor or int of a quotient, a named boolean mask,
and minimum and maximum read too; a division by a negative number or by an index is not read
(no chunk skipped: the division is not nondecreasing there). The model's count and the
kernel's chunk loop are the same rule; emulated at odd sizes against the float64 oracle."""

from __future__ import annotations

import pytest

import napkin
from napkin.commands.run import random_inputs
from napkin.compiler.plan import plan
from napkin.compiler.schedule import ATTENTION
from napkin.pipeline import lowered, run_plan

TEXT = """axis b, h, q, x
axis d = 16
in Q[b h q d]: f16
in K[b h x d]: f16
in V[b h x d]: f16
S[b h q x] = Q * K / 4
{named}O[b h q d] = softmax[x](where({cond}, S, -inf)) * V
out O: f16
"""
x, q = ("index", "x"), ("index", "q")
BLOCK = ("le", ("floordiv", x, ("const", 64.0)), ("floordiv", q, ("const", 64.0)))
SPELLINGS = {
    "floordiv": ("x // 64 <= q // 64", BLOCK),
    "floor": ("floor(x / 64) <= floor(q / 64)",
              ("le", ("floor", ("div", x, ("const", 64.0))),
               ("floor", ("div", q, ("const", 64.0))))),
    "named": ("M", BLOCK),
    "blocks of a window": ("x // 64 <= q // 64 and q // 64 - x // 64 < 4", None),
    "minimum": ("x <= minimum(q, size(x) // 2)", None),
    "int": ("int(x / 64) <= int(q / 64)", None),
}
BIG = {"b": 1, "h": 16, "q": 2048, "x": 2048}


def _text(spelling: str, block: int = 64) -> str:
    cond = SPELLINGS[spelling][0] if spelling in SPELLINGS else spelling
    named = "M[q x] = x // 64 <= q // 64\n" if cond == "M" else ""
    return TEXT.format(cond=cond, named=named).replace("64", str(block))


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_mask_through_floor_divisions_skips_chunks(spelling):
    p = plan(napkin.load(_text(spelling)), "h100", BIG)
    (kp,) = p.kernels
    assert kp.schedule.engine == ATTENTION
    expected = SPELLINGS[spelling][1]
    assert kp.model.mask is not None and (expected is None or kp.model.mask == expected), \
        kp.model.mask
    share = {"blocks of a window": 0.15, "minimum": 0.4}.get(spelling, 0.6)
    assert kp.cost.computed < share, kp.cost.computed


def test_block_causal_costs_what_causal_does_and_explain_says_it():
    from napkin.explain import render_text, report
    p = plan(napkin.load(_text("floordiv")), "h100", BIG)
    causal = plan(napkin.load(_text("x <= q")), "h100", BIG)
    assert p.time < 1.1 * causal.time, (p.time, causal.time)
    text = render_text(report(p))
    assert "skips the chunks of x where x // 64 <= q // 64 holds nowhere" in text, text


def test_a_floor_division_costs_its_instructions_where_the_mask_cuts_a_chunk():
    """issue_mask.MASK_DIVIDE (SASS, sm_90): block-causal's mask by 64 costs 8.2 lane
    instructions a score where it cuts a chunk, by 48 15.2; causal's 1."""
    from napkin.compiler.issue_mask import mask_ops
    by = {k: ("le", ("floordiv", x, ("const", k)), ("floordiv", q, ("const", k)))
          for k in (64.0, 48.0)}
    assert mask_ops(("le", x, q), "x") == 1.0
    assert mask_ops(by[64.0], "x") == pytest.approx(8.2)
    assert mask_ops(by[48.0], "x") == pytest.approx(15.2)


@pytest.mark.parametrize("cond", ["x // -64 >= q // -64", "x // (q + 1) < 1"])
def test_a_division_not_nondecreasing_is_not_read(cond):
    """By a negative number the quotient falls as the index grows; by an index it is no
    function of one: the bounds of the operands' bounds would be wrong, so no chunk is
    skipped (and the values stay the oracle's: the thorough run below)."""
    p = plan(napkin.load(_text(cond)), "h100", BIG)
    assert all(kp.model.mask is None for kp in p.kernels)


def test_the_kernel_bounds_its_chunk_loop_by_the_blocks():
    """The lowering reads the same mask: the chunk loop runs from the first to the last chunk
    where it may hold (codegen/masks.index_span), its test through napkin_floordiv."""
    p = plan(napkin.load(_text("floordiv", 16)), "h100", {"b": 1, "h": 2, "q": 129, "x": 129},
             {"stream": {"x": 16}, "group": {"q": 32}})
    _, source = lowered(p)
    assert "cfirst" in source and "napkin_floordiv(" in source


EMULATED = [(spelling, n, hints) for spelling in ("floordiv", "named", "blocks of a window")
            for n in (37, 65, 129) for hints in (True, False)]


@pytest.mark.thorough       # (g++ builds each kernel: about 2.5 CPU-s)
@pytest.mark.parametrize("spelling, n, hints", EMULATED + [
    ("minimum", 65, True), ("floor", 37, True), ("int", 65, True), ("x // -16 >= q // -16", 37, True)])
def test_masks_through_floor_divisions_emulated_against_the_oracle(spelling, n, hints,
                                                                   within_budget):
    """Blocks of 16 at odd sizes: with chunks of 16 and blocks of 32 rows (chunks cut by the
    mask beside whole ones), and the planner's own tiles."""
    d = napkin.load(_text(spelling, 16))
    shape = {"b": 1, "h": 2, "q": n, "x": n}
    p = plan(d, "h100", shape, {"stream": {"x": 16}, "group": {"q": 32}} if hints else None)
    inputs = random_inputs(d, shape, n)
    within_budget(d, inputs, run_plan(p, inputs, shape), p)
