"""Shared fixtures: random generators, library diagrams, and the tolerance rule."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _bytecode_outside_the_checkout() -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (these machines set it: no __pycache__ in the
    checkouts), every process of a run compiled the sources it imports again: each xdist
    worker napkin's modules and the tests' (pytest's assertion rewriting: about 3.4 of the
    6.5 CPU-s a worker spent collecting), and each `python -m napkin` a test starts. The run
    keeps their bytecode in the user's cache folder instead (PYTHONPYCACHEPREFIX, which the
    workers and subprocesses inherit), still none in the checkout; a prefix the user chose is
    theirs, and a folder that is not trusted (runtime/trusted.py) is not used."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX") \
            or sys.pycache_prefix is not None:
        return
    import platformdirs
    from napkin.runtime import trusted
    folder = Path(platformdirs.user_cache_dir("napkin")) / "pycache"
    if trusted.ensure(folder) is not None:
        return
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    sys.dont_write_bytecode = False
    del os.environ["PYTHONDONTWRITEBYTECODE"]


_bytecode_outside_the_checkout()

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import napkin  # noqa: E402
from napkin.runtime import compare  # noqa: E402

# The default suite's fuzz slices draw the same examples on every run (CI must not pass or
# fail by the luck of the draw); the long random budgets, with fresh seeds per batch, are
# benchmarks/fuzz.py's. NAPKIN_FUZZ_RANDOM=1 draws anew here too.
settings.register_profile("default-suite", derandomize=True)
settings.register_profile("random", derandomize=False)
settings.load_profile("random" if os.environ.get("NAPKIN_FUZZ_RANDOM") else "default-suite")
if not os.environ.get("NAPKIN_FUZZ_RANDOM"):
    # derandomize fixes the seed, but Hypothesis (6.170 here) also draws, now and then, integers,
    # floats and strings it finds as literals in the local modules imported so far in the process
    # (napkin's package and benchmarks/, not tests/): a test's draws would then depend on which
    # tests ran before it in that process (pytest-xdist's scheduling, -k, a lone file) and on every
    # literal in napkin's source. The default suite draws from its strategies alone.
    from hypothesis.internal.conjecture import providers as _providers

    if hasattr(_providers, "_get_local_constants"):
        _no_local_constants = _providers.Constants()
        _providers._get_local_constants = lambda: _no_local_constants


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def within_budget():
    """Assert that a backend's output meets the tolerance rule against the float64 oracle."""

    def check(diagram, inputs: dict, outputs: dict, plan=None) -> None:
        # the order-aware bound only with the plan that ran (its longest sequential sums):
        # without one, it would bound every order of every reduction, looser than these
        # tests' cases need, so they keep the rule without it
        ref, naive, order = compare.references(diagram, inputs, plan, plan is not None)
        for sig in diagram.outputs:
            verdict = compare.check(outputs[sig.name], ref[sig.name], naive[sig.name], sig.dtype,
                                    sig.name, order and order[sig.name])
            assert verdict.ok, verdict.message

    return check


def load(text_or_name, **sizes):
    return napkin.load(text_or_name, **sizes)


# Parameters marked `thorough` (pytest.param(..., marks=pytest.mark.thorough)) and tests so
# marked run with NAPKIN_FUZZ_SCALE >= 2 only: more of what the default run already covers
# (another target of the same family, more payloads), kept out of CI's CPU budget.
THOROUGH = float(os.environ.get("NAPKIN_FUZZ_SCALE", "1")) >= 2


def pytest_collection_modifyitems(config, items):
    if THOROUGH:
        return
    skip = pytest.mark.skip(reason="thorough: runs with NAPKIN_FUZZ_SCALE>=2")
    for item in items:
        if item.get_closest_marker("thorough") is not None:
            item.add_marker(skip)


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="Rewrite golden files (expected diagnostics, CUDA) from the current output.")


@pytest.fixture
def golden(request):
    """Compare text with a golden file; `--update-goldens` rewrites the file instead."""
    update = request.config.getoption("--update-goldens")

    def check(path, text: str) -> None:
        if update or not path.exists():
            if not update:
                pytest.fail(f"golden file {path} is missing; run pytest --update-goldens and review it")
            path.write_text(text)
            return
        assert text == path.read_text(), f"output differs from {path}; review, then --update-goldens"

    return check


@pytest.fixture(scope="session")
def compiled():
    """compiled(source, arch, options) -> NVRTC's `Compiled` for `source` (cubin, PTX, ptxas's
    resources), through the run's kernel cache (runtime/binaries.py): for tests that read what
    NVRTC makes of a source and are not about NVRTC or the cache (tests/runtime/test_nvrtc.py
    and test_cache.py call those directly). A warm cache answers without compiling, and a source
    two tests read is compiled once."""
    from napkin.runtime import binaries, nvrtc

    def compile(source: str, arch: str = "sm_90", options: tuple[str, ...] = ()):
        b = binaries.get(source, arch, options)
        return nvrtc.Compiled(ptx=b.ptx, cubin=b.cubin, log=b.log, arch=arch, options=tuple(options),
                              resources=nvrtc.parse_ptxas_report(b.log))
    return compile
