"""Where built emulators live and how one is known to be napkin's own, intact build.

The folder: $NAPKIN_EMULATOR_CACHE, else the user's cache folder, used when runtime/trusted.py's
rule accepts it (else a private folder of this process's, with one warning). A build is
sealed: its ELF image, then the SHA-256 of the image, then a magic line (the loader ignores
bytes past the image). `verified` is what every run checks first; `entries` and `clear`
(for `napkin cache`) see only sealed files, so nothing else in the folder is touched.

What every build with one set of flags links or includes (build.py's `support-<key>/`
folder: the headers, the precompiled header, the runtime object) is sealed as a folder: a
manifest (magic, the SHA-256 of the rest, then name, size and SHA-256 of every file) written
before the folder is moved into place; `verified_folder` accepts it only when it holds
exactly those files, each intact, private and regular, before every build that uses it (the
66 MB hash of the precompiled header is done once per process while the files' inode,
size and change times stay the same).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

from .. import trusted

SEAL = b"\nNAPKIN-EMULATOR-1\n"
SUFFIX = ".emu"
MANIFEST = "napkin-support.manifest"
MANIFEST_MAGIC = b"NAPKIN-SUPPORT-1\n"
_CHECKED: dict[str, tuple] = {}        # folder -> the stat facts it was verified with


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


def _digest(path: Path) -> str | None:
    fd = trusted.open_private(path)
    if fd is None:
        return None
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def seal_folder(folder: Path) -> None:
    """Write the manifest of every file in `folder` (before it is moved into place)."""
    files = {name: [path.stat().st_size, _digest(path)] for name, path in trusted.regular_files(folder)}
    body = json.dumps(files, sort_keys=True).encode()
    (folder / MANIFEST).write_bytes(MANIFEST_MAGIC + hashlib.sha256(body).digest() + body)


def _facts(folder: Path) -> tuple | None:
    """What must not change for a verified folder to stay verified (None: not a folder of
    regular files this user alone can write)."""
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or trusted.problem(folder) is not None:
            return None
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        facts = [(st.st_ino, st.st_mtime_ns, st.st_ctime_ns)]
        for e in entries:
            est = e.stat(follow_symlinks=False)
            if not stat.S_ISREG(est.st_mode):
                return None
            facts.append((e.name, est.st_ino, est.st_size, est.st_mtime_ns, est.st_ctime_ns))
        return tuple(facts)
    except OSError:
        return None


def verified_folder(folder: Path) -> bool:
    """Whether `folder` holds exactly its manifest's files, each private, regular and intact."""
    facts = _facts(folder)
    if facts is None:
        return False
    if _CHECKED.get(str(folder)) == facts:
        return True
    data = trusted.read(folder / MANIFEST)
    start = len(MANIFEST_MAGIC) + 32
    if data is None or not data.startswith(MANIFEST_MAGIC) or \
            hashlib.sha256(data[start:]).digest() != data[len(MANIFEST_MAGIC):start]:
        return False
    try:
        files = json.loads(data[start:])
    except (ValueError, RecursionError):
        return False
    names = {name for name, _ in trusted.regular_files(folder)} - {MANIFEST}
    if not isinstance(files, dict) or set(files) != names:
        return False
    for name, expected in files.items():
        path = folder / name
        if not isinstance(expected, list) or [path.lstat().st_size, _digest(path)] != expected:
            return False
    _CHECKED[str(folder)] = facts
    return True


def discard_folder(folder: Path) -> None:
    """Move a folder that failed `verified_folder` out of the way and delete it."""
    aside = folder.with_name(f".napkin-discard-{os.getpid()}-{folder.name}")
    try:
        os.rename(folder, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def folders(root: Path) -> list[tuple[Path, bool]]:
    """(path, intact) of every support folder napkin sealed in `root`."""
    out = []
    try:
        with os.scandir(root) as it:
            found = sorted(e.path for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return out
    for path in map(Path, found):
        head = trusted.read(path / MANIFEST, len(MANIFEST_MAGIC))
        if head == MANIFEST_MAGIC:
            out.append((path, verified_folder(path)))
    return out


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
    """Delete napkin's builds and support folders in `root` (nothing else); how many went."""
    n = trusted.remove(path for path, _, _ in entries(root))
    for path, _ in folders(root):
        discard_folder(path)
        n += not path.exists()
    return n
