"""The one rule for every directory napkin keeps files in (the kernel cache, the emulator's
builds, anything later), and for reading and writing the files in it.

A directory is trusted when it is a real directory owned by this user that no one else can
write to, and every directory above it is owned by this user or root and is not writable by
others unless it is sticky (as /tmp is: others cannot rename what is ours there). Napkin
creates its directories 0700. When the configured directory is not trusted, a cache uses a
private directory of its own instead (`private_dir`: made by mkdtemp, 0700, removed at
exit) or memory, and says so once; never a shared folder.

A file in a trusted directory is read only if it is a regular file (not a symlink, FIFO or
device) owned by this user and not writable by others (`read`); files are written to a
private temporary name beside their place and moved into place (`write`), so a reader sees a
whole file or none. What a file holds (magic, checksum) is each cache's own format.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("napkin")
TEMP_PREFIX = ".napkin-tmp-"
_WARNED: set[str] = set()
_PRIVATE: dict[str, Path] = {}


def warn_once(message: str) -> None:
    """Log `message` as a warning the first time this process meets it."""
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("napkin: %s", message)


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _owned(st: os.stat_result, allow_root: bool) -> bool:
    uid = _uid()
    return uid is None or st.st_uid == uid or (allow_root and st.st_uid == 0)


def _others_write(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def problem(path: Path) -> str | None:
    """None if `path` is a trusted directory, else why it is not."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot use {path}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if not _owned(st, allow_root=False):
        return f"{path} belongs to another user"
    if _others_write(st):
        return f"{path} can be written by other users"
    absolute = Path(os.path.abspath(path))
    for above in [*absolute.parents, *Path(os.path.realpath(path)).parents]:
        try:
            st = os.lstat(above)
        except OSError as exc:
            return f"cannot use {above}: {exc.strerror or exc}"
        if stat.S_ISLNK(st.st_mode):      # a link is as safe as the folder holding it (checked too)
            if not _owned(st, allow_root=True):
                return f"{above} is a link that belongs to another user"
            continue
        if not _owned(st, allow_root=True):
            return f"{above} (above {path}) belongs to another user"
        if _others_write(st) and not st.st_mode & stat.S_ISVTX:
            return f"{above} (above {path}) can be written by other users"
    return None


def ensure(path: Path) -> str | None:
    """Create `path` (0700, parents too) if needed; None if it is then trusted, else why not."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror or exc}"
    return problem(path)


def private_dir(purpose: str) -> Path:
    """This process's own directory for `purpose` (mkdtemp: 0700, unique), removed at exit."""
    if purpose not in _PRIVATE:
        made = Path(tempfile.mkdtemp(prefix=f"napkin-{purpose}-"))
        _PRIVATE[purpose] = made
        atexit.register(shutil.rmtree, made, True)
    return _PRIVATE[purpose]


def directory(configured: Path, purpose: str) -> Path:
    """`configured` if it is (or can be made) trusted, else a private directory, with a warning."""
    why = ensure(configured)
    if why is None:
        return configured
    fallback = private_dir(purpose)
    warn_once(f"not using {configured} for the {purpose} cache ({why}); using {fallback} "
              "for this process only")
    return fallback


def open_private(path: Path) -> int | None:
    """A read-only descriptor of `path` if it is a regular file of this user's that no one else
    can write, else None. Never follows a symlink and never blocks on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not _owned(st, allow_root=False) or _others_write(st):
        os.close(fd)
        return None
    return fd


def read(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of `path` (at most `limit`) if `open_private` accepts it, else None."""
    fd = open_private(path)
    if fd is None:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError:
        return None


def write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write `data` to `path` whole: a private temporary file beside it, moved into place.
    Raises OSError (a full or read-only disk); leaves no temporary behind."""
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove(paths) -> int:
    """Unlink each of `paths` (files napkin has recognised as its own); how many went."""
    n = 0
    for path in paths:
        try:
            os.unlink(path)
            n += 1
        except OSError:
            pass
    return n


def regular_files(path: Path):
    """(name, path) of the regular files directly in `path` (no symlinks, FIFOs or folders);
    nothing when the folder cannot be read."""
    try:
        with os.scandir(path) as it:
            found = [(e.name, Path(e.path)) for e in it if e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    return sorted(found)
