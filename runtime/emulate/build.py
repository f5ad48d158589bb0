"""Compiling kernel source + emulator header + generated main with g++, cached.

A build is keyed by a hash of everything that goes into it: the kernel source,
the generated main, the emulator's headers and runtime, the flags (sanitizer
included) and the compiler's version. Binaries land in the cache atomically
(built in a private folder, then `os.replace`d into place).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import BUILD, EmulatorError, no_compiler
from .hostgen import KERNEL_FILE, host_main_source

CXX = "g++"
HERE = Path(__file__).resolve().parent
HEADER = HERE / "napkin_emulate.h"
BUILD_VERSION = 1
COMPILE_TIMEOUT_S = 600

BASE_FLAGS = ("-std=c++20", "-O1", "-fno-strict-aliasing", "-pthread", "-w", "-DNAPKIN_EMULATE")
SANITIZER_FLAGS = {
    "none": (),
    "address": ("-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                "-fno-omit-frame-pointer"),
    "thread": ("-g", "-fsanitize=thread"),
}


def cache_dir() -> Path:
    """Where built emulators are kept: $NAPKIN_EMULATOR_CACHE, else the user's cache folder.

    The one place that reads the environment variable.
    """
    explicit = os.environ.get("NAPKIN_EMULATOR_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    existing = next((p for p in (base, *base.parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK):
        base = Path(tempfile.gettempdir())
    return base / "napkin" / "emulator"


@functools.lru_cache(maxsize=None)
def compiler_version(cxx: str) -> str:
    path = shutil.which(cxx)
    if path is None:
        raise no_compiler(cxx)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return f"{path}\n{out.stdout.splitlines()[0] if out.stdout else ''}"


def _emulator_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(HERE.iterdir()) if p.suffix in (".h", ".cpp")}


def build_key(source: str, main: str, flags: tuple[str, ...], sanitize: str, cxx: str) -> str:
    blob = json.dumps({"v": BUILD_VERSION, "source": source, "main": main, "emulator": _emulator_texts(),
                       "flags": flags, "sanitize": sanitize, "cxx": compiler_version(cxx)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def build(source: str, signatures, sanitize: str, *, cxx: str | None = None) -> Path:
    """Path of the emulator binary for this source and these signatures, building it if needed."""
    cxx = cxx or CXX
    main = host_main_source(signatures)
    flags = BASE_FLAGS + SANITIZER_FLAGS[sanitize]
    key = build_key(source, main, flags, sanitize, cxx)
    root = cache_dir()
    target = root / f"{key}.emu"
    if target.exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    try:
        (work / KERNEL_FILE).write_text(source)
        (work / "main.cpp").write_text(main)
        cmd = [cxx, *flags, f"-I{HERE}", "-include", str(HEADER), "main.cpp", "-o", "emu"]
        try:
            proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except FileNotFoundError:
            raise no_compiler(cxx) from None
        except subprocess.TimeoutExpired as exc:
            raise EmulatorError(BUILD, f"g++ did not finish within {COMPILE_TIMEOUT_S} s",
                                report=str(exc.stderr or "")) from None
        if proc.returncode != 0:
            raise EmulatorError(BUILD, "g++ could not compile the kernel for the CPU emulator",
                                report=proc.stderr, help=f"command: {' '.join(cmd)}")
        os.replace(work / "emu", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
