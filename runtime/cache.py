"""The disk cache of compiled kernels: one file per entry, never torn, never trusted blindly.

Where: `NAPKIN_CACHE_DIR`, else the user's cache directory (platformdirs). The
directory is created 0700 and used only if the user owns it and no one else
can write to it; otherwise napkin keeps entries in memory and warns once.

An entry is one file: a magic line, the length of a JSON header (the full
key, metadata, the payload's length and SHA-256) and the payload (a cubin).
It is written to a temporary file and moved into place with `os.replace`, so
a reader sees a whole entry or none; a truncated, corrupted or mismatched
entry is ignored (and rebuilt by the caller).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"NAPKIN-CACHE-1\n"
ENV = "NAPKIN_CACHE_DIR"
log = logging.getLogger("napkin")


@dataclass(frozen=True)
class Entry:
    key: dict
    meta: dict
    payload: bytes


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def default_dir() -> Path:
    override = os.environ.get(ENV)
    if override:
        return Path(override)
    import platformdirs
    return Path(platformdirs.user_cache_dir("napkin")) / "kernels"


def safe_dir(path: Path) -> str | None:
    """None if `path` is a directory only this user controls, else why not."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError as exc:
        return f"cannot create {path}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} belongs to another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} can be written by other users"
    return None


class Cache:
    """Entries by key; on disk when the directory is safe, else in memory."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_dir()
        problem = safe_dir(self.path)
        self.on_disk = problem is None
        self.problem = problem
        self._memory: dict[str, Entry] = {}
        if problem:
            log.warning("napkin: not using the kernel cache on disk (%s); caching in memory", problem)

    def _file(self, key: dict) -> Path:
        return self.path / (key_digest(key) + ".entry")

    def get(self, key: dict) -> Entry | None:
        if not self.on_disk:
            return self._memory.get(key_digest(key))
        try:
            data = self._file(key).read_bytes()
        except OSError:
            return None
        entry = decode(data)
        if entry is None or entry.key != key:
            return None
        return entry

    def put(self, key: dict, meta: dict, payload: bytes) -> Entry:
        entry = Entry(key, meta, payload)
        if not self.on_disk:
            self._memory[key_digest(key)] = entry
            return entry
        data = encode(entry)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._file(key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return entry

    def entries(self) -> list[tuple[Path, Entry | None]]:
        if not self.on_disk:
            return [(Path("<memory>") / k, e) for k, e in sorted(self._memory.items())]
        out = []
        for p in sorted(self.path.glob("*.entry")):
            try:
                out.append((p, decode(p.read_bytes())))
            except OSError:
                out.append((p, None))
        return out

    def clear(self) -> int:
        if not self.on_disk:
            n = len(self._memory)
            self._memory.clear()
            return n
        n = 0
        for p in list(self.path.glob("*.entry")) + list(self.path.glob(".tmp-*")):
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
        return n


def encode(entry: Entry) -> bytes:
    header = json.dumps({"key": entry.key, "meta": entry.meta, "length": len(entry.payload),
                         "sha256": hashlib.sha256(entry.payload).hexdigest()},
                        sort_keys=True).encode()
    return MAGIC + len(header).to_bytes(8, "little") + header + entry.payload


def decode(data: bytes) -> Entry | None:
    """The entry in `data`, or None if it is not a whole, intact entry."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        return None
    start = len(MAGIC) + 8
    size = int.from_bytes(data[len(MAGIC):start], "little")
    if size > len(data) - start:
        return None
    try:
        header = json.loads(data[start:start + size])
    except (ValueError, UnicodeDecodeError):
        return None
    payload = data[start + size:]
    if not isinstance(header, dict) or header.get("length") != len(payload):
        return None
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        return None
    return Entry(header.get("key"), header.get("meta", {}), payload)
