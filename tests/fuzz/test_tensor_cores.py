"""Random matrix products forced onto tensor cores, emulated against the reference
(the strategy and the check are in products.py)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

from .products import attentions, check, check_attention, products

SCALE = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1"))
# CI's slice (each example builds an emulator with g++, ~1 s); benchmarks/fuzz.py runs the
# same strategies for minutes


@settings(max_examples=max(1, int(6 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(products())
def test_random_products_on_tensor_cores_match_the_reference(case):
    check(case)


@settings(max_examples=max(1, int(5 * SCALE)), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(attentions())
def test_random_attention_on_tensor_cores_matches_the_reference(case):
    check_attention(case)
