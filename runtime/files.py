"""Writing output files (-o, --save, --json, ...) so that nothing half-written is left on disk.

Where the path is (or a symlink leads to) a regular file or nothing, the data goes to a
temporary file beside it, which is then moved into place: a reader sees the old file or the
new one, never part of one, a symlink keeps pointing at its (replaced) target, and the
replaced file's permissions are kept; a read-only file is refused, not replaced. Anything
else, a device (`/dev/null`, `/dev/stdout`), a FIFO or a socket, is opened and written as it
is, never replaced. `check_output` says before any work is done whether a path can be
written at all (`-`, which many tools read as standard output, is refused, not made a file).
"""

from __future__ import annotations

import io
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..diagrams.diagnostics import error

if TYPE_CHECKING:   # NumPy is imported by save_npz, not by the commands that only write text
    import numpy as np

HELP = "check that the directory exists and is writable"


def _read_umask() -> int:
    mask = os.umask(0)   # the only portable way to read it; done once, at import
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _cannot(target, why, help: str = HELP) -> Exception:
    return error("N0807", f"cannot write {target}: {why}", help=help)


def _where(path: str | os.PathLike) -> tuple[Path, bool]:
    """(the path to write, whether to write it in place): a symlink to a regular file (or to
    nothing yet) is followed to its target; only a regular file or a new one is replaced."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Path(os.path.realpath(path)), False
    except OSError as exc:
        raise _cannot(path, exc.strerror or exc) from None
    if stat.S_ISDIR(st.st_mode):
        raise _cannot(path, "it is a directory", help="name a file in it (or elsewhere): "
                      f"{os.path.join(os.fspath(path), 'NAME')}")
    if not stat.S_ISREG(st.st_mode):
        return Path(path), True       # a device or FIFO, reached through any links
    return Path(os.path.realpath(path)), False


def check_output(path: str | os.PathLike | None, reads=()) -> None:
    """N0807 now, before any work, if `path` cannot be written (an empty path, a missing or
    unwritable directory, a directory in the way, a file that cannot be opened for writing);
    N0811 if it is one of the files the command `reads`: (what, path) pairs such as
    ("the diagram", ...), compared as files (through links), not as names."""
    if path is None:
        return
    if not os.fspath(path):
        raise error("N0807", "cannot write '': the path is empty",
                    help="name a file, or leave the option out (-o: to print to standard output)")
    if os.fspath(path) == "-":      # many tools' standard output: never a file named `-`
        raise error("N0807", "cannot write '-': napkin takes it as no file name",
                    help="leave the option out to print to standard output (-o), or name the "
                    "file `./-`")
    target, in_place = _where(path)
    for what, source in reads:
        if _same_file(path, source):
            alias = "" if os.fspath(source) == os.fspath(path) else f" ({source})"
            raise error("N0811", f"cannot write {path}: it is {what}{alias}, which this command "
                        "reads", help="write to another file name")
    if in_place:
        ok = os.access(target, os.W_OK)
    else:
        _refuse_read_only(path, target)
        parent = target.parent
        if not parent.is_dir():
            named = Path(path).parent      # (as written, unless a link leads elsewhere)
            where = named if os.path.realpath(named) == str(parent) else \
                f"{parent} (where the link {path} leads)"
            raise _cannot(path, f"the directory {where} does not exist")
        ok = os.access(parent, os.W_OK | os.X_OK)
    if not ok:
        raise _cannot(path, "permission denied")


def _refuse_read_only(path, target: Path) -> None:
    """N0807 if `target` is an existing regular file that is read-only: one its owner cannot
    write, or one with no write permission for anyone (refused even where the process could
    replace it, as root can: the file's mode says it is not to be replaced)."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return                         # nothing there yet
    if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK):
        raise error("N0807", f"cannot write {path}: the file is read-only",
                    help="make it writable (chmod u+w) or write to another file name")


def _mode(target: Path) -> int:
    """The mode a written file gets: the replaced file's, else what open() would give."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~_UMASK


def check_apart(outputs: dict) -> None:
    """N0807 now, before any work, if two output options (option -> path, None when not given)
    name one file (by any name: the second write would replace the first)."""
    seen: dict = {}
    for option, path in outputs.items():
        if path is None or not os.fspath(path):
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise error("N0807", f"cannot write {path} twice: {seen[key]} and {option} name the "
                        "same file", help=f"give {option} another file name")
        seen[key] = option


def _same_file(path, source) -> bool:
    """Whether `path` is (by any name, link or hard link) the regular file `source`."""
    if source is None or not os.fspath(source):
        return False
    try:
        return stat.S_ISREG(os.stat(source).st_mode) and os.path.samefile(path, source)
    except OSError:       # either does not exist (yet): nothing to overwrite
        return False


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` to `path`: atomically for a (new) regular file, in place for a device or
    a FIFO; N0807 on any failure, with nothing half-written left behind."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    target, in_place = _where(path)
    if in_place:
        try:
            with open(target, "wb") as f:
                f.write(payload)
        except OSError as exc:
            raise _cannot(path, exc.strerror or exc) from None
        return
    _refuse_read_only(path, target)
    mode = _mode(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                   dir=target.parent if str(target.parent) else ".")
    except OSError as exc:
        raise _cannot(path, exc.strerror or exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp creates 0600; give the file the mode of the one it replaces, or the
            # mode open() would (0666 less the umask)
            os.fchmod(f.fileno(), mode)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        _discard(tmp)
        raise _cannot(path, exc.strerror or exc) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """The arrays as an .npz file, keyed by name (bf16, which .npy cannot name, is stored as
    its raw 2-byte patterns, |V2; `napkin run --inputs` reads it back as bf16)."""
    import numpy as np
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_atomic(path, buf.getvalue())
