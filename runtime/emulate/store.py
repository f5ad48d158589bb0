"""Where built emulators live and how one is known to be napkin's own, intact build.

The folder: $NAPKIN_EMULATOR_CACHE, else the user's cache folder, used when runtime/trusted.py's
rule accepts it (else a private folder of this process's, with one warning). A build is
sealed: its ELF image, then the SHA-256 of the image, then a magic line (the loader ignores
bytes past the image). `verified` is what every run checks first; `entries` and `clear`
(for `napkin cache`) see only sealed files, so nothing else in the folder is touched.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .. import trusted

SEAL = b"\nNAPKIN-EMULATOR-1\n"
SUFFIX = ".emu"


def configured_dir() -> Path:
    """Where built emulators are meant to be kept: $NAPKIN_EMULATOR_CACHE, else the user's
    cache folder. The one place that reads the environment variable."""
    explicit = os.environ.get("NAPKIN_EMULATOR_CACHE")
    if explicit:
        return Path(explicit)
    import platformdirs
    return Path(platformdirs.user_cache_dir("napkin")) / "emulator"


def cache_dir() -> Path:
    """The folder builds and runs use: the configured one when trusted, else a private one."""
    return trusted.directory(configured_dir(), "emulator")


def seal(image: bytes) -> bytes:
    return image + hashlib.sha256(image).digest() + SEAL


def sealed(data: bytes) -> bool:
    """Whether `data` is an image followed by its own checksum and the seal."""
    image = data[:-32 - len(SEAL)]
    return (data.endswith(SEAL) and len(data) > 32 + len(SEAL)
            and hashlib.sha256(image).digest() == data[len(image):-len(SEAL)])


def verified(path: Path) -> bool:
    """Whether `path` may be executed: a private regular file, executable, sealed."""
    fd = trusted.open_private(path)
    if fd is None:
        return False
    with os.fdopen(fd, "rb") as f:
        if not os.fstat(f.fileno()).st_mode & 0o100:
            return False
        try:
            return sealed(f.read())
        except OSError:
            return False


def _tail(path: Path) -> bytes | None:
    fd = trusted.open_private(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - len(SEAL)))
            return f.read()
        except OSError:
            return None


def entries(root: Path) -> list[tuple[Path, bool, int]]:
    """(path, intact, size) of every build napkin sealed in `root`."""
    out = []
    for name, path in trusted.regular_files(root):
        if name.endswith(SUFFIX) and _tail(path) == SEAL:
            out.append((path, verified(path), path.lstat().st_size))
    return out


def clear(root: Path) -> int:
    """Delete napkin's builds in `root` (nothing else); how many were removed."""
    return trusted.remove(path for path, _, _ in entries(root))
