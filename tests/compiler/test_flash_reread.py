"""Q held in registers or re-read from shared memory every chunk (Choice.reread): a field of
the Schedule, a choice of attention on the tensor cores only."""

from __future__ import annotations

import dataclasses

import pytest

import napkin
from napkin.compiler.plan import plan, with_choices
from napkin.diagrams.diagnostics import NapkinError


def test_only_attention_re_reads_q():
    d = napkin.load("matmul")
    p = plan(d, "h100", {"m": 4096, "n": 4096, "k": 4096})
    (kp,) = p.kernels
    with pytest.raises(NapkinError, match="re-reads Q from shared memory"):
        with_choices(p, [dataclasses.replace(kp.choice, reread=True)])
