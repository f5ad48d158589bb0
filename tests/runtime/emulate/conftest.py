"""Fixtures of the CPU emulator tests.

Kernels live in kernels/*.cu; a test source is the prelude followed by the kernel
file, exactly as generated code is laid out, so line numbers in reports count
the prelude's lines too.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "kernels"


@pytest.fixture(scope="session")
def prelude() -> str:
    return (files("napkin.codegen") / "prelude" / "napkin.cuh").read_text()


@pytest.fixture(scope="session")
def kernel(prelude):
    """kernel("name.cu") -> prelude + kernel text."""

    def load(name: str) -> str:
        return prelude + "\n" + (KERNELS / name).read_text()

    return load


@pytest.fixture(scope="session")
def line_of():
    """line_of(source, marker) -> the 1-based line of the only line containing marker."""

    def find(source: str, marker: str) -> int:
        hits = [i + 1 for i, text in enumerate(source.splitlines()) if marker in text]
        assert len(hits) == 1, (marker, hits)
        return hits[0]

    return find


@pytest.fixture(scope="session")
def seed_support():
    """seed(folder): link or copy the support folders (precompiled header, runtime object) that this
    run's own emulator cache already holds into a fresh cache folder, so a test about a fresh
    cache does not pay g++ for them again (about 4 CPU-s each). A folder not built yet is not
    copied: the test then builds it as usual."""
    import shutil

    from napkin.runtime.emulate import build
    source = build.cache_dir()

    def seed(folder: Path) -> None:
        if not source.is_dir() or source == folder:
            return
        for support in source.glob("support-*"):
            if support.is_dir() and not support.is_symlink() and not (folder / support.name).exists():
                shutil.copytree(support, folder / support.name, copy_function=_link_or_copy)
    return seed


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link (the support folders are ~70 MB each, and no test writes into them; copying
    them cost about a CPU-second a test), else a copy (another file system)."""
    import os
    import shutil
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
