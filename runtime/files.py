"""Writing files so that nothing half-written is ever left on disk."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..diagrams.diagnostics import error

if TYPE_CHECKING:   # NumPy is imported by save_npz, not by the commands that only write text
    import numpy as np


def _read_umask() -> int:
    mask = os.umask(0)   # the only portable way to read it; done once, at import
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write to a temporary file beside `path`, then move it into place."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                   dir=target.parent if str(target.parent) else ".")
    except OSError as exc:
        raise error("N0807", f"cannot write {target}: {exc.strerror or exc}",
                    help="check that the directory exists and is writable") from None
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp creates 0600; give the file the mode open() would (0666 less the umask)
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        _discard(tmp)
        raise error("N0807", f"cannot write {target}: {exc.strerror or exc}",
                    help="check that the directory exists and is writable") from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


def save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    import numpy as np
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_atomic(path, buf.getvalue())
