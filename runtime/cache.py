"""The disk cache of compiled kernels (and explain's figures): one file per entry, never torn,
never trusted blindly.

Where: `NAPKIN_CACHE_DIR`, else the user's cache directory (platformdirs), used only when
runtime/trusted.py's rule accepts it; otherwise napkin keeps entries in memory and warns
once. A write that fails (a full or read-only disk) warns once and the call goes on
uncached.

An entry is one file: a magic line, the SHA-256 of everything after it, then the length of
a JSON header (the full key, metadata, the payload's length) and the payload (a cubin). The
checksum covers every byte but the magic, which is compared, so a flipped bit anywhere is
seen. A truncated, corrupted, malformed or mismatched entry is ignored (and rebuilt by the
caller); it never raises.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from . import trusted

MAGIC = b"NAPKIN-CACHE-2\n"
SUFFIX = ".entry"
ENV = "NAPKIN_CACHE_DIR"
_DIGEST = 32


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


class Cache:
    """Entries by key; on disk when the directory is trusted, else in memory."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_dir()
        self.problem = trusted.ensure(self.path)
        self.on_disk = self.problem is None
        self._memory: dict[str, Entry] = {}
        if self.problem:
            trusted.warn_once(f"not using the kernel cache on disk ({self.problem}); "
                              "caching in memory")

    def _file(self, key: dict) -> Path:
        return self.path / (key_digest(key) + SUFFIX)

    def get(self, key: dict) -> Entry | None:
        found = self._memory.get(key_digest(key))
        if found is not None or not self.on_disk:
            return found
        data = trusted.read(self._file(key))
        entry = decode(data) if data is not None else None
        if entry is None or entry.key != key:
            return None
        return entry

    def put(self, key: dict, meta: dict, payload: bytes) -> Entry:
        entry = Entry(key, meta, payload)
        if self.on_disk:
            try:
                trusted.write(self._file(key), encode(entry))
                return entry
            except OSError as exc:
                trusted.warn_once(f"cannot write the kernel cache in {self.path} "
                                  f"({exc.strerror or exc}); going on without it")
        self._memory[key_digest(key)] = entry
        return entry

    def entries(self) -> list[tuple[Path, Entry | None]]:
        """Napkin's entries (files that start with its magic): each decoded, or None if damaged.
        Anything else in the folder (other files, links, FIFOs, folders) is not napkin's."""
        out = [(Path("<memory>") / k, e) for k, e in sorted(self._memory.items())]
        if not self.on_disk:
            return out
        for name, path in trusted.regular_files(self.path):
            if name.startswith(trusted.TEMP_PREFIX) or trusted.read(path, len(MAGIC)) != MAGIC:
                continue                    # not napkin's (read no further than the magic)
            data = trusted.read(path)
            out.append((path, decode(data) if data is not None else None))
        return out

    def _temporaries(self) -> list[Path]:
        """Napkin's own half-written files (a process killed while writing)."""
        found = []
        for name, path in trusted.regular_files(self.path):
            if name.startswith(trusted.TEMP_PREFIX):
                head = trusted.read(path, len(MAGIC))
                if head is not None and MAGIC.startswith(head):    # empty, or napkin's magic
                    found.append(path)
        return found

    def clear(self) -> int:
        """Delete napkin's entries and temporaries, and nothing else; how many were removed."""
        n = len(self._memory)
        self._memory.clear()
        if not self.on_disk:
            return n
        return n + trusted.remove([p for p, _ in self.entries()] + self._temporaries())


_DEFAULT: Cache | None = None


def default_cache() -> Cache:
    """The process's cache (NVRTC's binaries and explain's figures share it)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Cache()
    return _DEFAULT


def encode(entry: Entry) -> bytes:
    header = json.dumps({"key": entry.key, "meta": entry.meta, "length": len(entry.payload)},
                        sort_keys=True).encode()
    body = len(header).to_bytes(8, "little") + header + entry.payload
    return MAGIC + hashlib.sha256(body).digest() + body


def decode(data: bytes) -> Entry | None:
    """The entry in `data`, or None if it is not a whole, intact entry. Never raises."""
    start = len(MAGIC) + _DIGEST
    if not data.startswith(MAGIC) or len(data) < start + 8:
        return None
    body = data[start:]
    if hashlib.sha256(body).digest() != data[len(MAGIC):start]:
        return None
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        return None
    try:
        header = json.loads(body[8:8 + size])
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    payload = body[8 + size:]
    if (not isinstance(header, dict) or header.get("length") != len(payload)
            or not isinstance(header.get("key"), dict) or not isinstance(header.get("meta"), dict)):
        return None
    return Entry(header["key"], header["meta"], payload)
