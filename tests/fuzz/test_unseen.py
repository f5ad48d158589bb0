"""Diagrams from deep-learning practice that the library does not have (tests/fuzz/unseen/),
written for a sweep of unseen diagrams: each is planned, interpreted and (thorough tier, and
a few in the default run) emulated at small odd sizes on h100, a100 and hopper-toy, against
the float64 reference; the differentiable ones' gradients are checked against a central
finite difference of the float64 reference, and their backward diagrams run like any other.
Two of them found bugs: a residual add's two inputs shared one gradient output name
(`rmsnorm_residual`, N0202 from `napkin grad`) and a bilinear form's explain crashed on
hopper-toy (`bilinear`, an operand computed by an earlier kernel). A third sweep's
`view_bcast` (a transpose and a diagonal under full sums) failed an assertion in `napkin grad`. A fourth sweep's probes that found bugs are kept as
FOURTH (their tests name them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import napkin
from napkin.diagrams.diagnostics import Source
from napkin.runtime import reference

from .gen import Case, inputs_for
from .harness import check_case

FOLDER = Path(__file__).resolve().parent / "unseen"

# name -> sizes of its dynamic axes (odd, next to tile multiples; an axis an integer input
# indexes at least as large as the range its comment line gives)
SHAPES = {
    "rmsnorm_residual": {"t": 3, "c": 33},
    "bilinear": {"b": 3, "i": 31, "j": 33},
    "ln_mid_axis": {"b": 2, "c": 31, "s": 3},
    "groupnorm": {"n": 2, "g": 3, "k": 5, "p": 7},
    "attn_sink": {"b": 1, "h": 2, "q": 17, "x": 33},
    "moe_gather": {"t": 5, "e": 3, "m": 31, "o": 3},
    "ce_smooth": {"t": 3, "v": 65},
    "conv1d": {"b": 2, "t": 9, "ci": 3, "co": 5},
    "top1_gate": {"t": 5, "e": 31},
    "neg_mod": {"q": 7, "x": 9},
    "mla": {"b": 1, "h": 2, "q": 5, "x": 9},
    "paged_p3": {"b": 2, "h": 2, "q": 3, "n": 4},
    "varlen_window": {"h": 2, "q": 17},
    "argmax_ties": {"r": 3, "c": 129},
    "int_where": {"r": 31},
    "linear_attn": {"b": 2, "q": 3, "x": 33, "d": 5, "e": 3},
    "rope_positions": {"t": 3, "h": 2, "e": 8},
    "conv2d": {"n": 1, "c": 3, "o": 2},
    "prefix_lm": {"h": 2, "q": 9, "x": 9},
    "cumsum_rows": {"b": 2, "t": 65},
    # a second sweep (transformer blocks, decoding, sampling): interpreted and emulated in
    # the thorough tier, their gradients against finite differences in the default run
    "qk_norm_attn": {"t": 5, "s": 7, "h": 2},
    "tied_embedding": {"t": 7, "v": 11, "m": 9},
    "rope_pos_input": {"t": 5, "h": 2},
    "ce_ignore_index": {"t": 7, "v": 33},
    "paged_prefill": {"b": 2, "h": 2, "q": 3, "n": 7},
    "minp_sampling": {"r": 3, "c": 65},
    "decode_paged_lse": {"b": 2, "g": 2, "r": 3, "n": 11},
    "lse_two_axes": {"h": 3, "q": 5, "x": 33},
    "nested_gather": {"t": 5, "v": 7, "m": 9, "u": 11},
    # a third sweep (losses, norms, convolutions, scans, layouts): interpreted on h100 in the
    # default run, on a100 and hopper-toy and emulated in the thorough tier; gradients by
    # default. view_bcast found `napkin grad`'s assertion on a view under a full sum
    "view_bcast": {"i": 7},
    "t5_bias": {"h": 2, "q": 9, "x": 13},
    "decay_scan": {"b": 2, "t": 17},
    "clip_loss": {"n": 7, "d": 33},
    "mamba_dwconv": {"b": 2, "t": 13, "c": 7},
    "embedding_bag": {"b": 3, "j": 5, "v": 11, "m": 17},
    "kl_softmax": {"t": 5, "v": 65},
    "rms_res_geglu": {"t": 5, "c": 33, "f": 17},
    "geglu_bias": {"t": 9, "m": 31, "f": 7, "o": 5},
    "focal": {"n": 33, "k": 3},
    "reverse_cumsum": {"b": 2, "t": 17},
    "xattn_layout": {"b": 2, "h": 2, "q": 5, "x": 19},
    # a fourth sweep (brief fuzz25: empty axes, statistics beside an attention, hints): each
    # interpreted on h100 by default, the rest in the thorough tier. zero_axis's emulation
    # read past its empty inputs (the harness launched at the plan's size 1 for c = 0);
    # attn_lse_stats's statistics were +inf for a row of +inf and NaN scores on the tensor
    # cores (tests/codegen/test_flash_nan_max.py); per_d_softmax's explain said its scores
    # came from another kernel (tests/compiler/test_explain.py)
    "zero_axis": {"r": 3, "c": 0},
    "attn_lse_stats": {"q": 9, "x": 33},
    "per_d_softmax": {"b": 2, "q": 65, "x": 97},
}
SECOND = {"qk_norm_attn", "tied_embedding", "rope_pos_input", "ce_ignore_index", "paged_prefill",
          "minp_sampling", "decode_paged_lse", "lse_two_axes", "nested_gather"}
THIRD = {"view_bcast", "t5_bias", "decay_scan", "clip_loss", "mamba_dwconv", "embedding_bag",
         "kl_softmax", "rms_res_geglu", "geglu_bias", "focal", "reverse_cumsum", "xattn_layout"}
FOURTH = {"zero_axis", "attn_lse_stats", "per_d_softmax"}
HEAVY = {"rms_res_geglu", "clip_loss", "geglu_bias"}    # (1 to 2 s each: thorough tier)
# emulated in the default run too (the rest in the thorough tier): the two that found bugs
EMULATED = {"rmsnorm_residual", "bilinear"}


def _case(name: str, seed: int = 0) -> Case:
    return Case((FOLDER / f"{name}.napkin").read_text(), SHAPES[name], seed)


def test_every_unseen_diagram_has_sizes():
    assert sorted(p.stem for p in FOLDER.glob("*.napkin")) == sorted(SHAPES)


def _params():
    for name in SHAPES:
        for target in ("h100", "a100", "hopper-toy"):
            heavy = target != "h100" or name not in EMULATED
            later = name in SECOND or (name in THIRD | FOURTH and
                                       (target != "h100" or name in HEAVY))
            yield pytest.param(name, target, False, id=f"{name}-{target}-interpret",
                               marks=[pytest.mark.thorough] if later else [])
            yield pytest.param(name, target, True, id=f"{name}-{target}-emulate",
                               marks=[pytest.mark.thorough] if heavy else [])


@pytest.mark.parametrize("name, target, emulate", list(_params()))
def test_unseen_diagram(name, target, emulate):
    """Interpreted (and emulated) against the float64 reference; check_case raises on a
    difference, a crash or a refusal. a100 and hopper-toy plan differently from h100."""
    check_case(_case(name), target=target, emulate=emulate)


def _differentiable():
    for name in SHAPES:
        d = napkin.load(Source(name, (FOLDER / f"{name}.napkin").read_text()))
        if any(s.dtype.startswith(("f", "b")) and s.dtype != "bool" for s in d.inputs) and \
                name not in ("argmax_ties", "int_where", "neg_mod"):
            yield name


@pytest.mark.parametrize("name", list(_differentiable()))
def test_unseen_gradient_matches_a_finite_difference(name):
    """<dY, (f(x + eps v) - f(x - eps v)) / 2 eps> == <grad, v> on the float64 reference
    (inputs exact, not rounded to their dtypes), for a random direction v."""
    d = napkin.load(Source(name, (FOLDER / f"{name}.napkin").read_text()))
    g = napkin.grad(d)
    shape = SHAPES[name]
    x = {k: v.astype(np.float64) if v.dtype.kind == "f" else v
         for k, v in inputs_for(d, shape, 3).items()}
    rng = np.random.default_rng(4)
    y = reference.evaluate(d, x, exact=True)
    dy = {f"d{o.name}": rng.uniform(-1, 1, np.shape(y[o.name])) for o in d.outputs}
    grads = reference.evaluate(g, {s.name: {**x, **dy}[s.name] for s in g.inputs}, exact=True)
    wrt = [s.name[1:] for s in g.outputs]
    v = {k: rng.uniform(-1, 1, x[k].shape) for k in wrt}
    eps = 1e-5

    def pairing(sign):
        y = reference.evaluate(d, {**x, **{k: x[k] + sign * eps * v[k] for k in wrt}}, exact=True)
        return sum(float(np.sum(np.nan_to_num(y[o[1:]], posinf=0, neginf=0) * dy[o])) for o in dy)

    numeric = (pairing(1) - pairing(-1)) / (2 * eps)
    analytic = sum(float(np.sum(grads[f"d{k}"] * v[k])) for k in wrt)
    scale = sum(float(np.sum(np.abs(grads[f"d{k}"] * v[k]))) for k in wrt)
    assert abs(numeric - analytic) <= 1e-6 * max(1.0, scale), (numeric, analytic)


@pytest.mark.parametrize("name", ["rmsnorm_residual", "ln_mid_axis", "conv1d",
                                  pytest.param("attn_sink", marks=pytest.mark.thorough)])
def test_unseen_backward_runs(name):
    """The backward diagram itself, interpreted against the float64 reference (its inputs:
    the forward's, then a cotangent per output)."""
    text = napkin.grad((FOLDER / f"{name}.napkin").read_text()).source.text
    check_case(Case(text, SHAPES[name], 1), emulate=False)
