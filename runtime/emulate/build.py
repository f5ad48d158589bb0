"""Compiling kernel source + emulator header + generated main with g++, cached.

A build is keyed by a hash of everything that goes into it: the kernel source,
the generated main, the emulator's headers and runtime, the flags (sanitizer
included) and the compiler's version. It is compiled in a private folder inside
the cache folder (store.py: trusted, else private), sealed, made 0700 and
`os.replace`d into place, then verified again; a cached build is used only when
`store.verified` accepts it, else it is built anew (never executed). A cache
folder that cannot be written (full, read-only) costs a private build and a warning.

What every build with the same flags shares is built once and kept beside the
binaries (`support-<key>/`): `napkin_emulate.h` precompiled (g++ finds the
`.gch` in the first include folder) and the runtime (block scheduler, host main, and
the warp collectives, barriers and errors the kernel side only declares) as an object
file, optimised (-O2) whatever the kernel's level: most of a run's time is spent there
(`runtime_flags`). A kernel's build then parses only its own source and links (with gold where g++
has it): about 0.15 s of CPU, where including the headers' standard library and
compiling the collectives in every build took 0.38 s.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .. import trusted
from .errors import BUILD, EmulatorError, no_compiler
from .store import (SUFFIX, cache_dir, discard_folder, seal, seal_folder, verified,
                    verified_folder)
from .hostgen import KERNEL_FILE, host_main_source

CXX = "g++"
HERE = Path(__file__).resolve().parent
HEADER = HERE / "napkin_emulate.h"
RUNTIME = HERE / "napkin_emulate_runtime.cpp"
RUNTIME_OBJECT = "runtime.o"
BUILD_VERSION = 3      # 3: the runtime object at -O2 (`runtime_flags`): builds linking the -O0 one go
COMPILE_TIMEOUT_S = 600

BASE_FLAGS = ("-std=c++20", "-fno-strict-aliasing", "-pthread", "-w", "-DNAPKIN_EMULATE")
# the optimisation level is `flags_for`'s (api.py chooses it from the launches' threads)
SANITIZER_FLAGS = {
    "none": (),
    "address": ("-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                "-fno-omit-frame-pointer"),
    "thread": ("-g", "-fsanitize=thread"),
}


def flags_for(sanitize: str, optimize: bool = True) -> tuple[str, ...]:
    """g++'s flags for a build: -O1 when `optimize` or sanitized, else -O0. Over 136 launches
    the default test run makes (replayed at both levels), -O0 built them in 22.6 CPU-s against
    -O1's 50.7 (tensor-core kernels: 0.22 s against 0.6 s each) and ran them in 9.9 against
    4.3 (with the runtime at -O0 then; at -O2, `runtime_flags`, runs gain less from -O1): on
    empty caches -O0 is within 4% of the cheaper level chosen launch by launch, and
    -Og (29.5 + 5.2) is no better. Sanitizer builds stay at -O1 (what AddressSanitizer
    recommends, and each level is another precompiled header to build)."""
    level = "-O1" if optimize or sanitize != "none" else "-O0"
    return BASE_FLAGS + (level,) + SANITIZER_FLAGS[sanitize]


def runtime_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """g++'s flags for the runtime object that every build with `flags` links: -O2 unless
    sanitized. The runtime (block scheduler, fiber switches, warp collectives, the mma and
    ldmatrix exchange) was most of an emulated run's CPU time at -O0 (perf: warp_try_complete,
    mma_compute and the switches about 70% of a tensor-core attention's run); it is compiled
    once per flag set, so its level costs no kernel's build anything (2.5x faster runs of
    tensor-core kernels, 1.4x of CUDA-core attention). Sanitized runtimes keep the kernel's
    flags (-O1, what the sanitizers are tested with)."""
    if any(f.startswith("-fsanitize") for f in flags):
        return flags
    return tuple("-O2" if f in ("-O0", "-O1") else f for f in flags)


@functools.lru_cache(maxsize=None)
def compiler_version(cxx: str) -> str:
    path = shutil.which(cxx)
    if path is None:
        raise no_compiler(cxx)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    return f"{path}\n{out.stdout.splitlines()[0] if out.stdout else ''}"


@functools.lru_cache(maxsize=None)
def link_flags(cxx: str) -> tuple[str, ...]:
    """`-fuse-ld=gold` where g++ can link with it (about a quarter of the CPU time of the default
    linker for a kernel's build), else nothing. Which linker made a binary is not in its key:
    either links the same objects into the same program."""
    with tempfile.TemporaryDirectory(prefix="napkin-ld-") as tmp:
        (Path(tmp) / "probe.c").write_text("int main(void) { return 0; }\n")
        try:
            done = subprocess.run([cxx, "-x", "c", "probe.c", "-fuse-ld=gold", "-o", "probe"], cwd=tmp,
                                  capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return ()
        return ("-fuse-ld=gold",) if done.returncode == 0 else ()


def _emulator_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(HERE.iterdir()) if p.suffix in (".h", ".cpp")}


def _key(texts: dict[str, str], **parts) -> str:
    blob = json.dumps({"v": BUILD_VERSION, "emulator": texts, **parts}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def build_key(source: str, main: str, flags: tuple[str, ...], sanitize: str, cxx: str,
              texts: dict[str, str] | None = None) -> str:
    texts = _emulator_texts() if texts is None else texts
    return _key(texts, source=source, main=main, flags=flags, sanitize=sanitize,
                cxx=compiler_version(cxx))


def _compile(cmd: list[str], cwd: Path, cxx: str, what: str) -> None:
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except FileNotFoundError:
        raise no_compiler(cxx) from None
    except subprocess.TimeoutExpired as exc:
        raise EmulatorError(BUILD, f"g++ did not finish within {COMPILE_TIMEOUT_S} s",
                            report=str(exc.stderr or "")) from None
    if proc.returncode != 0:
        raise EmulatorError(BUILD, f"g++ could not compile {what} for the CPU emulator",
                            report=proc.stderr, help=f"command: {' '.join(cmd)}")


def _support(root: Path, flags: tuple[str, ...], cxx: str, texts: dict[str, str]) -> Path:
    """The folder every build with these flags shares: a copy of the very header texts the
    keys hash (g++ had read the checkout's headers again, so headers edited while a build ran
    went into a binary cached under the old headers' key), the header precompiled from that
    copy and the runtime object compiled from it."""
    key = _key(texts, flags=flags, runtime=runtime_flags(flags), cxx=compiler_version(cxx))
    final = root / f"support-{key}"
    if verified_folder(final):      # (what every build links: checked like a binary)
        return final
    with _one_builder(root):        # the other processes of a run wait for it, then use it
        if verified_folder(final):
            return final
        _build_support(root, final, flags, cxx, texts)
    if not verified_folder(final):
        raise EmulatorError(BUILD, f"the emulator support folder {final} changed after it was "
                                   "written",
                            help="check who else writes to the emulator cache folder")
    return final


@contextlib.contextmanager
def _one_builder(root: Path):
    """Held while a support folder is built: an exclusive lock on the cache folder itself (no
    file is added to it), so that the processes of one run (pytest's workers) that all start by
    needing the same support folder build it once instead of each (about 2.5 CPU-s apiece).
    Where the folder cannot be locked, they build side by side as before (the first rename wins)."""
    try:
        import fcntl
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except (ImportError, AttributeError, OSError):
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass
        yield
    finally:
        if fd is not None:
            os.close(fd)    # (releases the lock)


def _build_support(root: Path, final: Path, flags: tuple[str, ...], cxx: str,
                   texts: dict[str, str]) -> None:
    work = Path(tempfile.mkdtemp(prefix="support-build-", dir=root))
    try:
        for name, text in texts.items():
            (work / name).write_text(text)
        _compile([cxx, *flags, "-x", "c++-header", HEADER.name, "-o", f"{HEADER.name}.gch"], work,
                 cxx, "the emulator header")
        _compile([cxx, *runtime_flags(flags), "-I.", "-c", RUNTIME.name, "-o", RUNTIME_OBJECT], work, cxx,
                 "the emulator runtime")
        seal_folder(work)
        if os.path.lexists(final) and not verified_folder(final):
            discard_folder(final)   # planted, damaged or half-deleted: never linked
        try:
            os.rename(work, final)  # atomic; a folder another process finished first is kept
        except OSError:
            if not verified_folder(final):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build(source: str, signatures, sanitize: str, *, cxx: str | None = None,
          optimize: bool = True) -> Path:
    """Path of the emulator binary for this source and these signatures, building it if needed
    (at -O0 when not `optimize` and not sanitized: `flags_for`)."""
    cxx = cxx or CXX
    main = host_main_source(signatures)
    flags = flags_for(sanitize, optimize)
    texts = _emulator_texts()       # read once: every key and every compilation see these
    key = build_key(source, main, flags, sanitize, cxx, texts)
    root = cache_dir()
    target = root / f"{key}{SUFFIX}"
    if verified(target):
        return target
    try:
        return _build_in(root, target, source, main, texts, flags, cxx)
    except OSError as exc:      # a full or read-only cache folder: build privately instead
        fallback = trusted.private_dir("emulator")
        if root == fallback:
            raise EmulatorError(BUILD, f"cannot write the emulator build in {root}: "
                                       f"{exc.strerror or exc}") from None
        trusted.warn_once(f"cannot write the emulator cache in {root} ({exc.strerror or exc}); "
                          f"building in {fallback} for this process only")
        private = fallback / target.name
        return (private if verified(private)
                else _build_in(fallback, private, source, main, texts, flags, cxx))


def _build_in(root: Path, target: Path, source: str, main: str, texts: dict[str, str], flags,
              cxx: str) -> Path:
    support = _support(root, flags, cxx, texts)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    try:
        (work / KERNEL_FILE).write_text(source)
        (work / "main.cpp").write_text(main)
        # only the support folder's copy of the headers (and its .gch) can be read
        cmd = [cxx, *flags, f"-I{support}", "-include", HEADER.name, "main.cpp",
               str(support / RUNTIME_OBJECT), *link_flags(cxx), "-o", "emu"]
        _compile(cmd, work, cxx, "the kernel")
        image = work / "emu"
        image.write_bytes(seal(image.read_bytes()))
        os.chmod(image, 0o700)
        os.replace(image, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not verified(target):
        raise EmulatorError(BUILD, f"the emulator build {target} changed after it was written",
                            help="check who else writes to the emulator cache folder")
    return target
