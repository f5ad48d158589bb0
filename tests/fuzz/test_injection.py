"""Injection: hostile names and numbers through every field that carries one.

Each (payload, field) ends in a clean NapkinError (exit status 1-3 on the command
line, never 101) or in CUDA that does not depend on the payload's bytes and passes
the token allowlist; NVRTC's PTX defines exactly the expected `.entry` points.
"""

from __future__ import annotations

import os

import pytest

from napkin.codegen.lower import lower
from napkin.codegen.render import render
from napkin.compiler.plan import plan
from napkin.diagrams.sources import library_names

from .injection import ACCEPTED, API_FIELDS, CLI_FIELDS, attack, entry_problems, token_problems
from .payloads import corpus
from .plans import library

PAYLOADS = corpus()
CHUNKS = 4


def test_the_corpus_is_large_enough():
    assert len(PAYLOADS) >= 500


# payloads through the API; through the CLI (about 3x slower) an eighth of them in CI, all
# with NAPKIN_FUZZ_SCALE >= 2 (benchmarks/fuzz.py runs the injection kind for as long as asked)
CLI_CHUNKS = 8
THOROUGH = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2
CLI_RUN = range(CLI_CHUNKS) if THOROUGH else (0,)
# ... and through the API every payload with NAPKIN_FUZZ_SCALE >= 2, a quarter of them in
# the default run: its CPU (benchmarks/fuzz.py's injection kind runs them all)
API_RUN = range(CHUNKS) if THOROUGH else (0,)


@pytest.mark.parametrize("fields,chunk", [("api", c) for c in API_RUN] +
                         [("cli", c) for c in CLI_RUN])
def test_payloads_through_every_field(fields, chunk):
    names = list(API_FIELDS) if fields == "api" else list(CLI_FIELDS)
    step = CHUNKS if fields == "api" else CLI_CHUNKS
    outcomes = attack(PAYLOADS[chunk::step], names)
    assert len(outcomes) == len(PAYLOADS[chunk::step]) * len(names)
    leaks = [(o.field, o.problem) for o in outcomes if o.problem]
    assert not leaks, leaks[:10]


def test_accepted_payloads_compile_to_the_expected_entries():
    attack(["p0", "threadIdx", "asm", "a" * 128, "2147483648", "1e-46", "3.5e38", "0.1"])
    assert ACCEPTED
    for cuda in list(ACCEPTED.values())[:6]:
        assert not token_problems(cuda)
        assert not entry_problems(cuda)


@pytest.mark.parametrize("dtype, fused", [
    ("f32", True), pytest.param("f16", True, marks=pytest.mark.thorough), ("bf16", True),
    ("f32", False),
    # (the kernels one statement each in 16 bits: their conversions are the fused kernels')
    pytest.param("f16", False, marks=pytest.mark.thorough),
    pytest.param("bf16", False, marks=pytest.mark.thorough)])
def test_library_kernels_pass_the_token_allowlist(dtype, fused):
    # (that NVRTC's PTX of every library kernel has exactly the declared entries is checked
    # where those kernels are compiled anyway, tests/codegen/test_compile_library.py)
    for name in library_names():
        d = library(name, dtype)
        shape = {a: 37 for a, s in d.axes.items() if s is None}
        cuda = render(lower(plan(d, "h100", shape, fusion=fused)))
        assert not token_problems(cuda), (name, fused, token_problems(cuda)[:5])


@pytest.mark.parametrize("name, shape", [("cross_entropy", {"t": 4096, "v": 50257}),
                                         ("softmax", {"r": 4096, "c": 50257})])
def test_peeled_row_copies_pass_the_token_allowlist(name, shape):
    # (rows no 16-byte vector divides copied peeled, codegen/peeled.py: the library's default
    # sizes above do not peel; the fuzzer's injection step found its names at these)
    p = plan(library(name, "f16"), "h100", shape)
    assert any(kp.schedule.peels for kp in p.kernels)
    cuda = render(lower(p))
    assert not token_problems(cuda), token_problems(cuda)[:5]


def test_the_allowlist_catches_what_it_should():
    d = library("matmul", "f32")
    cuda = render(lower(plan(d, "h100", {"m": 5, "n": 6, "k": 7})))
    assert not token_problems(cuda)
    for bad in ['asm("trap;");', "#include <stdio.h>", "/* x */", 'printf("x");', "system(0);",
                "\u0430 = 1;", "// note"]:
        edited = cuda.replace("const int tid", bad + "\n  const int tid", 1)
        assert token_problems(edited), bad
