"""Attention whose values are its keys' own array (`O = softmax[x](Q * X) * X`: one input
read twice, K and V one node): FlashAttention (flash.examine refused it, "Q, K and V must be
loaded arrays", and the plan stored S: three kernels), its key tile staged once per chunk
and read as V too (codegen/flash.py), emulated against the float64 oracle."""

from __future__ import annotations

import pytest

import napkin
from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.commands.run import random_inputs
from napkin.compiler.flash import FlashSite
from napkin.compiler.plan import plan
from napkin.pipeline import run_plan

TEXT = """axis b, q, x
axis d = 16
in Q[b q d]: f16
in X[b x d]: f16
S[b q x] = where(x <= q, Q * X / 4, -inf)
O[b q d] = softmax[x](S) * X
out O: f16
"""


SHAPE = {"b": 2, "q": 37, "x": 37}


def _plan():
    return plan(napkin.load(TEXT), "h100", SHAPE)


def test_values_read_from_the_keys_array_are_flash_attention_with_one_tile():
    p = _plan()
    sites = [kp.schedule.site for kp in p.kernels]
    assert len(sites) == 1 and isinstance(sites[0], FlashSite), sites
    assert sites[0].k == sites[0].v
    source = render(lower(p))
    # Q's tile and one tile of X (K's, read as V's): two shared buffers, X copied once a chunk
    assert source.count("reinterpret_cast<__half*>(smem + ") == 2, source


@pytest.mark.thorough       # (g++ builds the kernel: about 2.5 CPU-s)
def test_values_read_from_the_keys_array_emulated_match_the_reference(within_budget):
    d, p = napkin.load(TEXT), _plan()
    inputs = random_inputs(d, SHAPE, 7)
    within_budget(d, inputs, run_plan(p, inputs, SHAPE), p)
