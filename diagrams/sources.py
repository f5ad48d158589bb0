"""Where a diagram's text comes from: a file, a standard-library name, or the text itself."""

from __future__ import annotations

import os
from pathlib import Path

from . import limits
from .diagnostics import Source, did_you_mean, error
from .parser import decode

LIBRARY_DIR = Path(__file__).with_name("library")


def library_names() -> list[str]:
    return sorted(p.stem for p in LIBRARY_DIR.glob("*.napkin"))


def library_source(name: str) -> Source:
    path = LIBRARY_DIR / f"{name}.napkin"
    return Source(f"<library:{name}>", path.read_text(encoding="utf-8"))


def read_file(path: str | os.PathLike) -> Source:
    p = Path(path)
    if _is_dir(p):
        raise directory(str(path))
    try:
        size = p.stat().st_size
        if size > limits.MAX_SOURCE_BYTES:
            raise error("N0501", f"{p} is {size:,} bytes; the limit is {limits.MAX_SOURCE_BYTES:,}",
                        help="split the diagram into smaller ones")
        data = p.read_bytes()
    except (OSError, ValueError) as exc:   # ValueError: a NUL or a lone surrogate in the path
        raise error("N0801", f"cannot read {p!s:.200}: {getattr(exc, 'strerror', None) or exc}",
                    help="check the path, or give a library name: " + ", ".join(library_names())) from None
    return decode(data, str(path))


def resolve(arg) -> Source:
    """A Source from a path, a library name, diagram text, bytes, or a Source."""
    if isinstance(arg, Source):
        return arg
    if isinstance(arg, (bytes, bytearray)):
        return decode(bytes(arg), "<input>")
    if isinstance(arg, os.PathLike):
        return read_file(arg)
    if not isinstance(arg, str):
        raise error("N0801", f"cannot load a diagram from a {type(arg).__name__}",
                    help="pass a path, a library name, or the diagram's text")
    if "\n" in arg or "=" in arg:
        return Source("<text>", arg)
    if len(arg) < 4096 and os.path.isfile(arg):
        return read_file(arg)
    if arg in library_names():
        return library_source(arg)
    if len(arg) < 4096 and _is_dir(arg):
        raise directory(arg)
    hint = did_you_mean(arg, library_names(),
                        "library diagrams: " + ", ".join(library_names()))
    if arg.endswith(".napkin") or os.sep in arg:
        raise error("N0801", f"no such file: {arg[:200]}", help=hint)
    raise error("N0801", f"`{arg[:200]}` is neither a file nor a library diagram", help=hint)


def directory(path: str):
    """N0801 for a directory given where a diagram file goes, naming the diagrams it holds."""
    try:
        held = sorted(p.name for p in Path(path).glob("*.napkin"))[:5]
    except OSError:
        held = []
    where = path.rstrip("/\\") or path
    hint = ("give one of its diagrams: " + ", ".join(f"{where}/{n}" for n in held)) if held \
        else "give a .napkin file or a library name: " + ", ".join(library_names())
    return error("N0801", f"{path[:200]} is a directory, not a diagram file", help=hint)


def _is_dir(path) -> bool:
    try:
        return os.path.isdir(path)
    except ValueError:      # a NUL in the path: read_file says so
        return False
