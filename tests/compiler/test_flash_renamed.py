"""Self-attention as people write it: K and V computed from the sequence Q comes from and read
with the key axis renamed (`K[h t d] = X * Wk`, `S = Q * K[h s d]`). Every reader reads K
through one renaming, so canonicalize computes it under the readers' names (rename.py:
`K[h s d] = X[s m] * Wk`) and attention plans FlashAttention, also under a `group t` hint
(which tiles the statements that keep t); where readers disagree (K also an output, a second
attention's queries, or summed in f32) K is computed once as written and FlashAttention reads
it through its renaming view (rounding an f32 K as it stages it); the user's f32 input is
never rounded. Each is checked against the float64 reference on the emulator."""

from __future__ import annotations

import numpy as np
import pytest

from ..sampling import sampled

import napkin
from napkin.compiler.canonical import canonicalize
from napkin.compiler.flash import examine
from napkin.compiler.plan import plan
from napkin.compiler import ir, stored16
from napkin.compiler.schedule import ATTENTION, CHAIN
from napkin.explain import render_text, report


SELF = """\
axis t, m, h, s
axis d = 64
in X[t m]: bf16
in Wq[m h d]: bf16
in Wk[m h d]: bf16
in Wv[m h d]: bf16
Q[h t d] = X * Wq
K[h t d] = X * Wk
V[h t d] = X * Wv
S[h t s] = Q * K[h s d]
O[t h d] = softmax[s](where(s <= t, S, -inf)) * V[h s d]
out O: bf16
"""
# only K computed and renamed (V loaded under the key axis)
K_ONLY = (SELF.replace("in Wv[m h d]: bf16\n", "in V[h s d]: bf16\n")
          .replace("V[h t d] = X * Wv\n", "").replace("* V[h s d]", "* V"))
# V's head e of another width, read renamed as V[h s e]
WIDE_V = (SELF.replace("axis d = 64", "axis d = 64\naxis e = 32").replace("Wv[m h d]", "Wv[m h e]")
          .replace("V[h t d] = X * Wv", "V[h t e] = X * Wv").replace("O[t h d]", "O[t h e]")
          .replace("V[h s d]", "V[h s e]"))
UNMASKED = SELF.replace("softmax[s](where(s <= t, S, -inf))", "softmax[s](S)")
# K also read as stored: the readers disagree, K is left as written (V still renamed), and
# summed in f32 it is stored f32 (with Q, its partner): attention rounds both as it stages them
BOTH = SELF + "R[t h] = sum[d](K[h t d])\nout R: f32\n"
# the user's f32 X: Q, K and V computed from it are never rounded, no FlashAttention
F32 = SELF.replace("in X[t m]: bf16", "in X[t m]: f32")
# K's statement reads its own row index (a bare axis, renamed with it)
INDEXED = SELF.replace("K[h t d] = X * Wk", "K[h t d] = X * Wk * (1 + float(t) / 16)")
# a group hint on t: it tiles Q's projection and attention's queries, K and V still renamed
HINTED = SELF + "group t by 64\n"
# readers that disagree, all products: K also an output, or also the queries of a second
# attention (whose keys are Q[h s d]); computed once, FlashAttention reads it renamed
OUT_K = SELF + "out K: bf16\n"
TWO = SELF.replace("out O: bf16", "S2[h t s] = K * Q[h s d]\n"
                   "O2[t h d] = softmax[s](S2) * V[h s d]\nout O: bf16\nout O2: bf16")
CASES = {"self": SELF, "k_only": K_ONLY, "wide_v": WIDE_V, "unmasked": UNMASKED, "both": BOTH,
         "indexed": INDEXED, "hinted": HINTED, "out_k": OUT_K, "two": TWO, "f32": F32}
FLASH = {"self": 1, "k_only": 1, "wide_v": 1, "unmasked": 1, "indexed": 1, "hinted": 1,
         "out_k": 1, "two": 2, "both": 1}      # FlashAttention kernels
VIEWED = {"out_k": ["K read as `K[h s d]`"], "both": ["K read as `K[h s d]`"],
          "two": ["K read as `K[h s d]`", "Q read as `Q[h s d]`"]}
SHAPE = {"t": 2048, "s": 2048, "m": 1024, "h": 8}
SMALL = {"t": 37, "m": 24, "h": 2}


def flash_sites(p) -> list:
    sites = [examine(p.graph, kp.kernel, kp.model, p.target, p.sizes) for kp in p.kernels]
    return [s for s in sites if s is not None and not isinstance(s, str)]


def reasons(p) -> list[str]:
    return [s for s in (examine(p.graph, kp.kernel, kp.model, p.target, p.sizes)
                        for kp in p.kernels) if isinstance(s, str)]


@pytest.mark.parametrize("case", sampled(sorted(CASES)))
def test_self_attention_read_renamed_plans_flashattention(case):
    p = plan(napkin.load(CASES[case]), "h100", SHAPE)
    said = render_text(report(p, compare=False))
    if case in FLASH:
        assert len(flash_sites(p)) == FLASH[case], reasons(p)
        assert any(kp.schedule.engine == "attention" for kp in p.kernels)
        renamed = "K computed with `s` where the diagram writes `t`"
        assert (renamed in said) == (case not in VIEWED), said
        for line in VIEWED.get(case, ()):       # computed once, read through its view
            assert line + " by the attention of kernel" in said, said
    else:   # the user's f32 precision
        assert not flash_sites(p)
        assert any("Q, K, V are f32" in r for r in reasons(p)), reasons(p)


def test_the_statement_is_relabelled_and_the_readers_read_it_plainly():
    g = canonicalize(napkin.load(SELF).ir)
    k, v = (g.graph["arrays"][n] for n in "KV")
    assert ir.type_of(g, k).axes == ("h", "s", "d") and ir.type_of(g, v).axes == ("h", "s", "d")
    for a in (k, v):
        assert not any(isinstance(ir.op(g, r), ir.View) for r in g.successors(a))
        (c,) = ir.operands(g, a)
        x = [u for u in ir.operands(g, c) if isinstance(ir.op(g, u), ir.View)]
        assert [ir.op(g, u).labels for u in x] == [("s", "m")]     # X[s m]
    q = g.graph["arrays"]["Q"]
    assert ir.type_of(g, q).axes == ("h", "t", "d")
    assert dict(g.graph["renamed"]) == {"K": (("t", "s"),), "V": (("t", "s"),)}   # (user's, new)
    eq = {e.name: e for e in g.graph["equations"]}
    assert eq["K"].axes == ("h", "s", "d") and eq["Q"].axes == ("h", "t", "d")
    both = canonicalize(napkin.load(BOTH).ir)
    assert ir.type_of(both, both.graph["arrays"]["K"]).axes == ("h", "t", "d")
    assert ir.type_of(both, both.graph["arrays"]["V"]).axes == ("h", "s", "d")


# cross-attention's keys projected from a sequence of their own: t only in K's statement
CROSS = (SELF.replace("in X[t m]: bf16\n", "in X[t m]: bf16\nin Q[h q d]: bf16\n")
         .replace("axis t, m, h, s", "axis t, m, h, s, q").replace("Q[h t d] = X * Wq\n", "")
         .replace("where(s <= t, S, -inf)", "S").replace("S[h t s]", "S[h q s]")
         .replace("O[t h d]", "O[q h d]"))


def test_a_group_hint_and_the_renaming_compose():
    """`--group t=64` (or `group t by 64` in the diagram) names the diagram's t: K and V are
    still computed along s, and the hint tiles the statements that keep t (Q's projection,
    attention's queries), so the hinted plan is FlashAttention (model, h100: 320 -> 65 us with
    the projection by Wo, f16); K's statement has no t (its tiles are the search's, explain
    says it). A group hint on s (the axis moved onto K's statement) or on a t that no other
    statement keeps (cross-attention's keys) leaves K as written; `--stream s` names a
    reduced axis, which the renaming never moves: FlashAttention streams s by 64."""
    d = napkin.load(SELF)
    for g in (canonicalize(d.ir, {"t"}, grouped={"t"}),
              canonicalize(napkin.load(SELF + "group t by 64\n").ir)):
        assert dict(g.graph["renamed"]) == {"K": (("t", "s"),), "V": (("t", "s"),)}
    assert "renamed" not in canonicalize(d.ir, {"s"}, grouped={"s"}).graph
    cross = napkin.load(CROSS)
    assert dict(canonicalize(cross.ir).graph["renamed"]) == {"K": (("t", "s"),),
                                                            "V": (("t", "s"),)}
    assert "renamed" not in canonicalize(cross.ir, {"t"}, grouped={"t"}).graph
    p = plan(d, "h100", SHAPE, {"stream": {"s": 64}})
    (site,) = flash_sites(p)
    (kp,) = [kp for kp in p.kernels if kp.schedule.engine == "attention"]
    assert kp.schedule.stream == ("s", 64), kp.schedule.stream
    p = plan(d, "h100", SHAPE, {"group": {"t": 64}})
    assert len(flash_sites(p)) == 1, reasons(p)
    hinted = {kp.schedule.engine for kp in p.kernels if [h.axis for h in kp.hints] == ["t"]}
    assert "attention" in hinted and "tensor-core product" in hinted    # Q's projection
    said = render_text(report(p, compare=False))
    assert "K computed with `s` where the diagram writes `t`, as every reader reads it (its " \
           "tiles are copied as stored); the `group t` hint tiles the statements that keep " \
           "`t`" in said, said


@pytest.mark.parametrize("case", [c if c == "self" else
                                  pytest.param(c, marks=pytest.mark.thorough) for c in CASES])
def test_emulated_matches_float64(case):
    """Planned at the shape above with d=16 (e=8) by -D, FlashAttention where it applies, the
    emulated CUDA at small odd sizes (t=s=37, m=24, h=2) against the float64 reference."""
    from napkin.commands.run import random_inputs
    from napkin.pipeline import run_plan
    from napkin.runtime import compare
    d = napkin.load(CASES[case], d=16, **({"e": 8} if case == "wide_v" else {}))
    p = plan(d, "h100", SHAPE)
    assert len(flash_sites(p)) == FLASH.get(case, 0), reasons(p)
    small = {**SMALL, "s": SMALL["t"]}
    inputs = random_inputs(d, small, 3)
    sizes = {**small, "d": 16, **({"e": 8} if case == "wide_v" else {})}
    out = run_plan(p, inputs, sizes, timeout_s=600)
    for name, v in compare.against_reference(d, inputs, out, plan=p).items():
        assert v.ok, (name, v.message)


@pytest.mark.thorough
def test_the_gradient_of_self_attention_matches_float64():
    """`napkin.grad` derives from the diagram as written; its forward reads K and V renamed
    too (`t10[h s d] = K[h s d]`), and its dV, dK read the cotangents renamed back, which the
    renaming leaves alone (their statements contract over t). Q, K and V are stored in 16 bits
    although the logsumexp kernel reads them into the scores on the CUDA cores (it undid them,
    stored16.fallen_back), so the recomputed forward is FlashAttention and dQ, dK, dV chains
    (model, h100: 416 -> 247 us; with the projection by Wo at d=64, 1.08 ms -> 408 us).
    Planned at the shape above, emulated at small odd sizes against the float64 reference."""
    from napkin.commands.run import random_inputs
    from napkin.pipeline import run_plan
    from napkin.runtime import compare
    g = napkin.grad(napkin.load(SELF, d=16))
    assert dict(canonicalize(g.ir).graph["renamed"]) == {"K": (("t", "s"),), "V": (("t", "s"),)}
    p = plan(g, "h100", SHAPE)
    engines = {e.name: kp.schedule.engine for kp in p.kernels for e in p.graph.graph["equations"]
               if e.stmt in kp.kernel.equations and e.stmt not in kp.kernel.recomputed}
    assert engines["O"] == ATTENTION and engines["g10"] == engines["dQ"] == CHAIN, engines
    assert {"Q", "K", "V"} <= {line.split()[0] for line in stored16.said(p)}
    small = {**SMALL, "s": SMALL["t"]}
    inputs = random_inputs(g, small, 3)
    out = run_plan(p, inputs, {**small, "d": 16}, timeout_s=600)
    for name, v in compare.against_reference(g, inputs, out, plan=p).items():
        assert v.ok, (name, v.message)


def test_a_statement_reading_an_input_twice_reads_one_renamed_view(rng):
    """RMSNorm's `X * X` reads X through one edge with two ports: every read is `X[b s m]`. The
    normalised rows read by K alone along the keys are computed along them, interpreted
    against the float64 reference."""
    text = ("axis b, t, s, m, h, d\nin X[b t m]: f32\nin g[m]: f32\nin Wk[m h d]: f32\n"
            "N1[b t m] = X * rsqrt(mean[m](X * X) + 1e-6) * g\n"
            "K[b h s d] = N1[b s m] * Wk\nout K: f32")
    d = napkin.load(text)
    g = canonicalize(d.ir)
    assert dict(g.graph["renamed"]) == {"N1": (("t", "s"),)}
    x = g.graph["inputs"]["X"]
    assert {ir.op(g, v).labels for v in g.successors(x)} == {("b", "s", "m")}
    X, gm, Wk = (rng.standard_normal(shape).astype(np.float32)
                 for shape in ((2, 7, 12), (12,), (12, 3, 5)))
    (got,), (want,) = (napkin.run(d, X, gm, Wk, backend=b) for b in ("interpret", "reference"))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
