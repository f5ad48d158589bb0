"""Reading arrays from .npy and .npz files given on the command line (`napkin run --inputs`,
`--data`): every array header checked against the language's size limit and against the
bytes the file holds before anything is read, no pickles; N0806 for anything unreadable."""

from __future__ import annotations

import os
import zipfile

import numpy as np

from ..diagrams.diagnostics import error
from ..diagrams.limits import MAX_SIZE


def load_arrays(path: str, names: list[str]) -> dict[str, np.ndarray]:
    """The arrays of an .npz file by key, or of an .npy file as names[0] (one name only),
    headers checked first (N0806 for anything unreadable)."""
    unreadable = (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    with z.open(info) as member:
                        _check_header(path, info.filename, member, info.file_size)
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        with open(path, "rb") as f:
            _check_header(path, "", f, os.fstat(f.fileno()).st_size)
        if len(names) != 1:
            raise error("N0806", f"{path} is an .npy file (one array), but the diagram has "
                        f"{len(names)} inputs", help="give an .npz file: numpy.savez(path, "
                        + ", ".join(f"{n}=..." for n in names) + ")")
        return {names[0]: np.load(path, allow_pickle=False)}
    except unreadable as exc:
        raise error("N0806", f"cannot read inputs from {path}: {exc}",
                    help="give an .npz file written by numpy.savez") from None


def _check_header(path: str, member: str, f, stored: int) -> None:
    """N0806 if the array header in `f` declares more than the limits or than `stored` holds."""
    where = f"{path}" + (f" ({member})" if member else "")
    version = np.lib.format.read_magic(f)
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read(f)
    if dtype.hasobject:
        raise ValueError(f"{where} holds Python objects, not numbers")
    n = 1
    for axis, size in enumerate(shape):
        if size > MAX_SIZE:
            raise error("N0806", f"{where}: dimension {axis} is {size:,}, more than the limit "
                        f"{MAX_SIZE:,} (2^40)", help="give arrays of smaller sizes")
        n *= size
    if n * dtype.itemsize > stored:
        raise error("N0806", f"{where}: the header declares shape {shape} ({n * dtype.itemsize:,} "
                    f"bytes of {dtype}), but the file holds only {stored:,} bytes",
                    help="the file is truncated or its header was edited; write it again "
                         "with numpy.savez")
